// Hand-made byte-level BPE tokenizer.json files for the data tests: GPT-2's byte alphabet, a
// vocabulary of the 256 bytes and extra tokens, and a tokenizer.json as Hugging Face writes it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace trainer::data::testing {

using nlohmann::json;

// GPT-2's byte-to-unicode alphabet, written out again here from its definition.
inline std::string byte_char(int b) {
  static const std::vector<std::string> chars = [] {
    std::vector<std::string> c(256);
    int next = 256;
    for (int i = 0; i < 256; ++i) {
      bool printable = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
      int cp = printable ? i : next++;
      c[size_t(i)] = cp < 0x80 ? std::string(1, char(cp))
                               : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    }
    return c;
  }();
  return chars[size_t(b)];
}

// A byte-level vocabulary: the 256 bytes as ids 0..255 (the id of a byte is the byte), then
// `tokens` from 256 on.
inline json vocab_json(const std::vector<std::string>& tokens) {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[byte_char(b)] = b;
  for (size_t i = 0; i < tokens.size(); ++i) v[tokens[i]] = 256 + int(i);
  return v;
}

// A GPT-2-like tokenizer.json (ByteLevel with its regex), as Hugging Face writes one.
inline json tokenizer_json(const std::vector<std::string>& tokens,
                           const std::vector<std::string>& merges) {
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array()},
            {"normalizer", nullptr}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab_json(tokens)},
                {"merges", merges}};
  return j;
}

// One entry of a tokenizer.json's added_tokens, as Hugging Face writes it.
inline json added_token(int id, const std::string& content, bool special = true,
                        bool normalized = true) {
  return {{"id", id},        {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

using Ids = std::vector<int32_t>;

// Ids joined.
inline Ids operator+(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The ids of s's bytes, unmerged: in vocab_json's vocabularies a byte's id is the byte.
inline Ids ids_of(std::string_view s) {
  Ids ids;
  for (char c : s) ids.push_back(uint8_t(c));
  return ids;
}

}  // namespace trainer::data::testing
