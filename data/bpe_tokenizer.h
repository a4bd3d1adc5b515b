// Byte-level BPE tokenizers (GPT-2, Pythia/GPT-NeoX, Llama-3) read from Hugging Face files,
// encoding exactly as Hugging Face `tokenizers` and tiktoken do. A tokenizer is identified by
// the hash of its canonical tokenizer.json, the same whichever files it came from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainer::data {

class BpeTokenizer {
 public:
  // `path`: a tokenizer.json file, or a folder holding tokenizer.json, or vocab.json +
  // merges.txt, or GPT-2's original encoder.json + vocab.bpe. Throws trainer::Error naming the
  // file and the field on any malformed or unsupported content.
  explicit BpeTokenizer(const std::filesystem::path& path);
  // The same from a tokenizer.json's bytes (canonical_json()'s or any other), read from `from`
  // (used in messages only).
  BpeTokenizer(std::string_view tokenizer_json, const std::filesystem::path& from);
  ~BpeTokenizer();
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // The ids of `text`, any byte string. Thread-safe. Special tokens written in the text are
  // encoded as ordinary text (tiktoken's encode_ordinary); added tokens that are not special
  // (GPT-NeoX's runs of spaces) are found in it first, as Hugging Face does. Invalid UTF-8 is
  // kept (Note [Invalid UTF-8] in bpe_pretokenizer.cpp). An NFC normalizer applies first.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of `ids`: decode(encode(s)) == s for every byte string s (NFC(s) under an NFC
  // normalizer). Throws trainer::Error on an id that names no token.
  std::string decode(std::span<const int32_t> ids) const;
  // The largest id of the vocabulary and the added tokens, plus one.
  int vocab_size() const;
  // The added tokens marked special ({text, id}), which encode never finds in text.
  std::vector<std::pair<std::string, int32_t>> special_tokens() const;
  // <|endoftext|> (GPT-2, Pythia), <|end_of_text|> (Llama-3) or </s>; -1 when there is none.
  int eos_id() const;
  // <|begin_of_text|> or <s>; else the eos (GPT-2 uses <|endoftext|> for both); -1 when none.
  int bos_id() const;
  // A deterministic Hugging Face tokenizer.json of this tokenizer (loadable by `tokenizers`):
  // the same bytes for the same vocabulary, merges, pre-tokenization and special tokens,
  // whichever files they came from.
  const std::string& canonical_json() const;
  // FNV-1a 64 of canonical_json(): what shards and checkpoints record.
  uint64_t hash() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The byte tokenizer's tokenizer.json: one token per byte value, its id the byte, then
// <|endoftext|> (256, the eos and bos); no merges and no pre-tokenization, so every byte string
// round-trips and no text is normalised.
std::string byte_tokenizer_json();

}  // namespace trainer::data
