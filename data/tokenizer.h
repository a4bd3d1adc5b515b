// SentencePiece tokenizers: training through the library's trainer API, encoding and decoding
// through SentencePieceProcessor. A tokenizer is identified by the hash of its content (Note
// [Tokenizer identity]), which shards and checkpoints record.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace trainer::data {

// Expands file names and glob patterns (each sorted); throws trainer::Error naming a pattern
// that matches nothing or a file that cannot be read.
std::vector<std::filesystem::path> expand_inputs(const std::vector<std::string>& patterns);

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // files or globs of text, one sentence/paragraph per line
  int vocab_size = 8000;
  std::string model_type = "bpe";   // bpe | unigram
  std::filesystem::path out;        // the .model file (a .vocab is written beside it)
  int threads = 0;                  // 0: all cores
  int64_t max_sentences = 2000000;  // lines sampled for training (0: all)
  double character_coverage = 0.9995;
  uint64_t seed = 0;
};

// Trains a tokenizer with byte fallback (no input maps to <unk>) and identity normalisation
// (decode(encode(s)) == s). Throws trainer::Error / UsageError.
void train_tokenizer(const TokenizerTrainOptions& options);

// The hash that identifies a tokenizer: FNV-1a of its .model bytes without the paths and the
// thread count SentencePiece stores in them, so a copy, or a retraining that gives the same
// pieces under another name, hashes the same.
uint64_t tokenizer_hash(std::string_view model_bytes);
// Whether `recorded` identifies these .model bytes: their tokenizer_hash, or the hash of all
// the bytes, which trainers before the content hash recorded in shards and checkpoints.
bool tokenizer_is(std::string_view model_bytes, uint64_t recorded);

class Tokenizer {
 public:
  // Loads a .model file; throws trainer::Error naming it.
  explicit Tokenizer(const std::filesystem::path& model);
  // The same from a .model file's bytes, read from `from`.
  Tokenizer(std::string_view model_bytes, const std::filesystem::path& from);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  // Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  int vocab_size() const;
  int eos_id() const;
  int bos_id() const;
  uint64_t hash() const { return hash_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  uint64_t hash_ = 0;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace trainer::data
