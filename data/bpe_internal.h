// Internal to the BPE tokenizer (BpeTokenizer, bpe_tokenizer.h): what its Hugging Face files
// say, checked, in one form whichever files it came from (bpe_files.cpp reads them and writes
// the canonical JSON), and the pre-tokenizer that cuts text into pieces
// (bpe_pretokenizer.cpp); bpe_tokenizer.cpp merges the pieces.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainer::data::bpe {

// GPT-2's pre-tokenization pattern: what ByteLevel with use_regex splits with.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// One pre-tokenization step: the text (each piece of the step before) is cut into the matches
// of `pattern` and the gaps between them (Hugging Face's Split with behavior Isolated).
struct SplitStep {
  std::string pattern;   // as written in the file: a regex, or the literal string
  bool literal = false;  // a Split with a "String" pattern
  bool operator==(const SplitStep&) const = default;
};

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = true;  // else encode finds it in the text, as Hugging Face does
};

struct Spec {
  std::filesystem::path from;                          // the file read, for messages
  std::vector<std::pair<int32_t, std::string>> vocab;  // model.vocab by increasing id
  std::vector<std::pair<int32_t, int32_t>> merges;     // token ids by rank (lowest first)
  std::vector<AddedToken> added;                       // by increasing id
  std::vector<SplitStep> splits;                       // then ByteLevel's byte mapping
  bool nfc = false;                                    // normalizer NFC (else none)
  bool ignore_merges = false;
};

// Reads a tokenizer.json file, a folder holding one, vocab.json + merges.txt, or encoder.json
// + vocab.bpe; throws trainer::Error naming the file (and line or field) on what it cannot use.
Spec read_spec(const std::filesystem::path& path);
// The same from a tokenizer.json's bytes, read from `from`.
Spec parse_tokenizer_json(std::string_view json, const std::filesystem::path& from);
// The deterministic tokenizer.json of a spec (Note [Canonical tokenizer.json]).
std::string canonical_json(const Spec& spec);

// GPT-2's byte-to-unicode alphabet: the UTF-8 of the character that stands for `byte` in a
// token's text.
std::string byte_char(uint8_t byte);
// The bytes a token's text stands for when each of its characters is some byte's character;
// false (and `out` unspecified) when one is not.
bool byte_level_bytes(std::string_view text, std::string& out);

// Cuts text into the pieces that BPE merges within: at invalid UTF-8 (Note [Invalid UTF-8]),
// then NFC when the spec asks, then by each Split step in turn.
class PreTokenizer {
 public:
  // Compiles the spec's patterns; throws trainer::Error naming spec.from on one that does not.
  explicit PreTokenizer(const Spec& spec);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;
  // Calls `piece` with each piece of text, in order; together they hold every byte of the
  // (normalized) text once. Thread-safe; `scratch` (the caller's, one per thread) holds NFC's
  // output.
  void cut(std::string_view text, std::string& scratch,
           const std::function<void(std::string_view)>& piece) const;

 private:
  class Pattern;
  void split(size_t step, std::string_view s,
             const std::function<void(std::string_view)>& piece) const;
  std::vector<Pattern> patterns_;
  bool nfc_ = false;
};

}  // namespace trainer::data::bpe
