// `trainer tokenizer`: train a SentencePiece tokenizer, or inspect / use any tokenizer (a
// SentencePiece .model, a tokenizer.json, or a folder holding a published model's files).
//   trainer tokenizer train --input <files/globs>... --vocab-size N --model-type bpe|unigram
//                           --out tok.model
//   trainer tokenizer info --tokenizer PATH
//   trainer tokenizer encode --tokenizer PATH [--input FILE | --text "..."]   (else stdin)
//   trainer tokenizer decode --tokenizer PATH [--input FILE]                  (else stdin)
#include <charconv>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "app/commands.h"
#include "app/options.h"
#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"

namespace trainer::app {

namespace {

constexpr const char* kUsage =
    "usage: trainer tokenizer train --input FILES... --vocab-size N "
    "[--model-type bpe|unigram|char] --out tok.model\n"
    "       trainer tokenizer train --model-type byte --out tok.json\n"
    "       trainer tokenizer info --tokenizer PATH\n"
    "       trainer tokenizer encode --tokenizer PATH [--input FILE | --text TEXT]\n"
    "       trainer tokenizer decode --tokenizer PATH [--input FILE]\n"
    "PATH: a SentencePiece .model, a tokenizer.json, or a folder holding tokenizer.model,\n"
    "tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe\n";

// A file's bytes as they are, or stdin's when `path` is empty.
std::string input_bytes(const std::string& path) {
  if (!path.empty()) return read_file(path);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Token ids written as decimal numbers separated by whitespace; throws naming the bad word.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& where) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    int64_t v = -1;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    CHECK(ec == std::errc() && end == word.data() + word.size() && v >= 0 && v < (1ll << 31),
          "{}: '{}' is not a token id", where, word);
    ids.push_back(int32_t(v));
  }
  return ids;
}

// info, encode and decode: the ids print space-separated on one line, no document markers
// added, so that they compare with another tool's directly.
int use(const std::string& action, const Args& rest) {
  std::string path, input, text;
  po::options_description desc("trainer tokenizer " + action);
  desc.add_options()("tokenizer", po::value(&path)->required(),
                     "a SentencePiece .model, a tokenizer.json, or a folder holding one, or "
                     "vocab.json + merges.txt (or encoder.json + vocab.bpe)");
  if (action != "info")
    desc.add_options()("input", po::value(&input), "file to read as it is (default: stdin)");
  if (action == "encode") desc.add_options()("text", po::value(&text), "text to encode");
  po::variables_map vm;
  if (!parse_options("tokenizer " + action, rest, desc, vm)) return 0;
  const data::Tokenizer tok(path);
  if (action == "info") {
    std::printf("tokenizer %s\nkind %s\nvocab_size %d\nhash %016llx\nbos_id %d\neos_id %d\n",
                tok.path().c_str(), tok.kind(), tok.vocab_size(), (unsigned long long)tok.hash(),
                tok.bos_id(), tok.eos_id());
    return 0;
  }
  if (action == "encode") {
    USAGE_CHECK(!(vm.count("text") && vm.count("input")),
                "tokenizer encode: give --input or "
                "--text, not both");
    const std::vector<int32_t> ids = tok.encode(vm.count("text") ? text : input_bytes(input));
    std::string out;
    out.reserve(ids.size() * 6);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    }
    std::cout << out << "\n";
    return 0;
  }
  const std::vector<int32_t> ids = parse_ids(input_bytes(input), input.empty() ? "stdin" : input);
  std::cout << tok.decode(ids);
  return 0;
}

}  // namespace

int cmd_tokenizer(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    if (args.empty()) throw UsageError("tokenizer: missing action (train, info, encode or decode)");
    return 0;
  }
  const std::string action = args[0];
  const Args rest(args.begin() + 1, args.end());
  if (action == "train") {
    data::TokenizerTrainOptions o;
    std::string out;
    po::options_description desc("trainer tokenizer train");
    desc.add_options()("input", po::value(&o.inputs)->multitoken(),
                       "text files or globs (one sentence or paragraph per line; none for byte)")(
        "vocab-size", po::value(&o.vocab_size),
        "vocabulary size (default: 8000; byte: 257, fixed)")(
        "model-type", po::value(&o.model_type)->default_value("bpe"),
        "bpe, unigram, char (SentencePiece's character model) or byte (256 byte tokens and "
        "<|endoftext|>, a tokenizer.json)")("out", po::value(&out)->required(),
                                            "output .model file (byte: a .json)")(
        "threads", po::value(&o.threads)->default_value(0), "threads (0: all cores)")(
        "max-sentences", po::value(&o.max_sentences)->default_value(2000000),
        "lines sampled for training (0: all)")(
        "character-coverage", po::value(&o.character_coverage)->default_value(0.9995),
        "share of characters covered by pieces (the rest fall back to bytes)")(
        "seed", po::value(&o.seed)->default_value(0), "sampling seed");
    po::variables_map vm;
    if (!parse_options("tokenizer train", rest, desc, vm)) return 0;
    if (vm.count("vocab-size") && o.model_type != "byte")
      require_range("tokenizer train", vm, "vocab-size", 300, 1 << 24);
    require_range("tokenizer train", vm, "threads", 0, 1024);
    require_range("tokenizer train", vm, "max-sentences", int64_t(0), int64_t(1) << 40);
    require_range("tokenizer train", vm, "character-coverage", 0.5, 1.0);
    o.out = out;
    data::train_tokenizer(o);
    data::Tokenizer tok(o.out);
    log::info("tokenizer: {} ({}, {} pieces, hash {:016x})", o.out.string(), o.model_type,
              tok.vocab_size(), tok.hash());
    return 0;
  }
  if (action == "info" || action == "encode" || action == "decode") return use(action, rest);
  throw UsageError(
      fmt::format("tokenizer: unknown action '{}' (train, info, encode or decode)", action));
}

}  // namespace trainer::app
