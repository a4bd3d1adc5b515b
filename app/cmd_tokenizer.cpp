// `trainer tokenizer`: train a SentencePiece tokenizer, or inspect / use one.
//   trainer tokenizer train --input <files/globs>... --vocab-size N --model-type bpe|unigram
//                           --out tok.model
//   trainer tokenizer info --model tok.model
//   trainer tokenizer encode --model tok.model [--text "..."]   (else reads stdin)
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "app/commands.h"
#include "app/options.h"
#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::app {

namespace {

constexpr const char* kUsage =
    "usage: trainer tokenizer train --input FILES... --vocab-size N [--model-type bpe|unigram]"
    " --out tok.model\n"
    "       trainer tokenizer info --model tok.model\n"
    "       trainer tokenizer encode --model tok.model [--text TEXT]\n";

}  // namespace

int cmd_tokenizer(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    if (args.empty()) throw UsageError("tokenizer: missing action (train, info or encode)");
    return 0;
  }
  const std::string action = args[0];
  const Args rest(args.begin() + 1, args.end());
  if (action == "train") {
    data::TokenizerTrainOptions o;
    std::string out;
    po::options_description desc("trainer tokenizer train");
    desc.add_options()("input", po::value(&o.inputs)->multitoken()->required(),
                       "text files or globs (one sentence or paragraph per line)")(
        "vocab-size", po::value(&o.vocab_size)->default_value(8000), "vocabulary size")(
        "model-type", po::value(&o.model_type)->default_value("bpe"), "bpe or unigram")(
        "out", po::value(&out)->required(), "output .model file")(
        "threads", po::value(&o.threads)->default_value(0), "threads (0: all cores)")(
        "max-sentences", po::value(&o.max_sentences)->default_value(2000000),
        "lines sampled for training (0: all)")(
        "character-coverage", po::value(&o.character_coverage)->default_value(0.9995),
        "share of characters covered by pieces (the rest fall back to bytes)")(
        "seed", po::value(&o.seed)->default_value(0), "sampling seed");
    po::variables_map vm;
    if (!parse_options("tokenizer train", rest, desc, vm)) return 0;
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
  if (action == "info" || action == "encode") {
    std::string model, text;
    po::options_description desc("trainer tokenizer " + action);
    desc.add_options()("model", po::value(&model)->required(), "tokenizer .model file")(
        "text", po::value(&text), "text to encode (default: stdin)");
    po::variables_map vm;
    if (!parse_options("tokenizer " + action, rest, desc, vm)) return 0;
    data::Tokenizer tok(model);
    if (action == "info") {
      std::printf("model %s\nvocab_size %d\nhash %016llx\nbos_id %d\neos_id %d\n", model.c_str(),
                  tok.vocab_size(), (unsigned long long)tok.hash(), tok.bos_id(), tok.eos_id());
      return 0;
    }
    if (!vm.count("text"))
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    std::vector<int32_t> ids = tok.encode(text);
    std::ostringstream os;
    for (size_t i = 0; i < ids.size(); ++i) os << (i ? " " : "") << ids[i];
    std::cout << os.str() << "\n";
    return 0;
  }
  throw UsageError(fmt::format("tokenizer: unknown action '{}' (train, info or encode)", action));
}

}  // namespace trainer::app
