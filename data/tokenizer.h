// Tokenizers: SentencePiece models (trained here through the library's trainer API, or a
// published model's tokenizer.model) and byte-level BPE (data/bpe_tokenizer.h: GPT-2, Pythia,
// Llama-3). A tokenizer is identified by the hash of its content (Note [Tokenizer identity]),
// which shards and checkpoints record, and travels as one file (tokenizer.model or a canonical
// tokenizer.json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace trainer::data {

class BpeTokenizer;

// Expands file names and glob patterns (each sorted); throws trainer::Error naming a pattern
// that matches nothing or a file that cannot be read.
std::vector<std::filesystem::path> expand_inputs(const std::vector<std::string>& patterns);

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // files or globs of text, one sentence/paragraph per line
  int vocab_size = 0;               // 0: 8000 (bpe, unigram, char), 257 (byte)
  std::string model_type = "bpe";   // bpe | unigram | char | byte
  std::filesystem::path out;        // the .model file (a .vocab is written beside it)
  int threads = 0;                  // 0: all cores
  int64_t max_sentences = 2000000;  // lines sampled for training (0: all)
  double character_coverage = 0.9995;
  uint64_t seed = 0;
};

// Trains a SentencePiece tokenizer (bpe, unigram, or char: SentencePiece's character model,
// with no space prepended) with byte fallback (no input maps to <unk>) and identity
// normalisation: decode(encode(s)) == s for valid UTF-8 text, except that SentencePiece writes
// spaces as U+2581 inside, so a U+2581 in the text decodes as a space, and that invalid UTF-8
// becomes U+FFFD. `byte` writes the byte tokenizer (byte_tokenizer_json(), a tokenizer.json:
// no input), which round-trips every byte string. Throws trainer::Error / UsageError.
void train_tokenizer(const TokenizerTrainOptions& options);

// The hash that identifies a tokenizer from its one-file bytes: for a SentencePiece model,
// FNV-1a of its .model bytes without the paths and the thread count SentencePiece stores in
// them, so a copy, or a retraining that gives the same pieces under another name, hashes the
// same; for a tokenizer.json, BpeTokenizer::hash.
uint64_t tokenizer_hash(std::string_view model_bytes);
// Whether `recorded` identifies these .model bytes: their tokenizer_hash, or the hash of all
// the bytes, which trainers before the content hash recorded in shards and checkpoints.
bool tokenizer_is(std::string_view model_bytes, uint64_t recorded);

// The file name of a tokenizer's one-file form: tokenizer.json for JSON bytes, else
// tokenizer.model.
const char* tokenizer_file_name(std::string_view bytes);

class Tokenizer {
 public:
  // Opens a SentencePiece .model, a tokenizer.json, or a folder holding a tokenizer.model
  // (first: Llama-2's folders hold both), a tokenizer.json, vocab.json + merges.txt or GPT-2's
  // encoder.json + vocab.bpe. Throws trainer::Error naming the file.
  explicit Tokenizer(const std::filesystem::path& path);
  // The same from its one-file bytes (bytes()), read from `from`.
  Tokenizer(std::string_view bytes, const std::filesystem::path& from);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  // Thread-safe. Special tokens written in the text are encoded as ordinary text.
  std::vector<int32_t> encode(std::string_view text) const;
  // The ids of a template's own text (a chat template's headers and footers): each special
  // token's text in it (leftmost, then longest) becomes that token, the rest is encoded as
  // ordinary text. Thread-safe.
  std::vector<int32_t> encode_template(std::string_view text) const;
  // The tokens ordinary text never encodes to, as {text, id}: a tokenizer.json's special added
  // tokens (<|im_start|>, <|eot_id|>), a SentencePiece model's control pieces (<s>, </s>).
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const { return specials_; }
  std::string decode(std::span<const int32_t> ids) const;
  int vocab_size() const;
  int eos_id() const;
  int bos_id() const;
  uint64_t hash() const { return hash_; }
  const std::filesystem::path& path() const { return path_; }
  // Its one-file form, which checkpoints and exports carry: tokenizer_file_name(bytes()) and
  // the bytes (a SentencePiece model's own, or BpeTokenizer::canonical_json).
  const std::string& bytes() const { return bytes_; }
  // "sentencepiece" or "bpe".
  const char* kind() const { return bpe_ ? "bpe" : "sentencepiece"; }

 private:
  void open(std::string_view bytes);
  std::filesystem::path path_;
  std::string bytes_;
  uint64_t hash_ = 0;
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<BpeTokenizer> bpe_;
};

}  // namespace trainer::data
