// Tokenizer training and use through SentencePiece.
#include "data/tokenizer.h"

#include <glob.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <thread>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/rng.h"

// Exported by libsentencepiece but not declared in its public headers.
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}

namespace trainer::data {

std::vector<fs::path> expand_inputs(const std::vector<std::string>& patterns) {
  std::vector<fs::path> files;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<fs::path> matched;
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) matched.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    CHECK(!matched.empty(), "{}: no such file (or no file matches the pattern)", pattern);
    std::sort(matched.begin(), matched.end());
    for (const fs::path& f : matched) {
      std::error_code ec;
      CHECK(fs::is_regular_file(f, ec), "{}: not a regular file", f.string());
      files.push_back(f);
    }
  }
  return files;
}

void train_tokenizer(const TokenizerTrainOptions& o) {
  if (o.model_type != "bpe" && o.model_type != "unigram")
    throw UsageError(fmt::format("model type must be bpe or unigram, got '{}'", o.model_type));
  if (o.vocab_size < 300)
    throw UsageError(
        fmt::format("vocab size {} is too small: byte fallback needs 256 byte "
                    "pieces plus specials and merges (use >= 300)",
                    o.vocab_size));
  if (o.out.empty()) throw UsageError("tokenizer train needs an output path (--out)");
  std::vector<fs::path> files = expand_inputs(o.inputs);
  std::string input;
  for (const fs::path& f : files) input += (input.empty() ? "" : ",") + f.string();
  fs::path prefix = o.out;
  if (prefix.extension() == ".model") prefix.replace_extension();
  if (prefix.has_parent_path()) fs::create_directories(prefix.parent_path());
  // Trained under a temporary name and renamed into place once complete: a failed run leaves
  // an earlier tokenizer (and nothing else) behind.
  fs::path staging = prefix;
  staging += ".tmp";
  auto with = [](fs::path p, const char* ext) { return p += ext; };
  RemoveUnlessKept staged(with(staging, ".model"));
  staged.add(with(staging, ".vocab"));
  int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::unordered_map<std::string, std::string> args = {
      {"input", input},
      {"model_prefix", staging.string()},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"character_coverage", fmt::format("{}", o.character_coverage)},
      {"num_threads", std::to_string(threads)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
  };
  sentencepiece::SetRandomGeneratorSeed(unsigned(o.seed == 0 ? 1 : o.seed));
  sentencepiece::logging::SetMinLogLevel(1);  // its progress chatter is INFO
  auto status = sentencepiece::SentencePieceTrainer::Train(args);
  CHECK(status.ok(), "tokenizer training failed: {}", status.ToString());
  fsync_path(with(staging, ".vocab"));
  fsync_path(with(staging, ".model"));
  fs::rename(with(staging, ".vocab"), with(prefix, ".vocab"));
  fs::rename(with(staging, ".model"), o.out);
  fsync_path(o.out.has_parent_path() ? o.out.parent_path() : fs::path("."));
}

uint64_t tokenizer_file_hash(const fs::path& model) {
  return hash64(read_file(model));
}

Tokenizer::Tokenizer(const fs::path& model)
    : path_(model), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  std::string bytes = read_file(model);
  hash_ = hash64(bytes);
  auto status = sp_->LoadFromSerializedProto(bytes);
  CHECK(status.ok(), "{}: not a SentencePiece model: {}", model.string(), status.ToString());
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  CHECK(status.ok(), "{}: encoding failed: {}", path_.string(), status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  for (int id : v)
    CHECK(id >= 0 && id < vocab_size(), "{}: token id {} out of range for vocab size {}",
          path_.string(), id, vocab_size());
  std::string text;
  auto status = sp_->Decode(v, &text);
  CHECK(status.ok(), "{}: decoding failed: {}", path_.string(), status.ToString());
  return text;
}

int Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int Tokenizer::eos_id() const {
  return sp_->eos_id();
}
int Tokenizer::bos_id() const {
  return sp_->bos_id();
}

}  // namespace trainer::data
