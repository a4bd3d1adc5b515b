// The byte-level BPE tokenizer on small hand-made vocabularies: merge order by rank and
// leftmost ties (against a plain reference merge, short and long pieces), ignore_merges,
// specials, invalid UTF-8, NFC, round trips on random bytes, one canonical JSON from the three
// file forms, threads, and every refusal naming its file and field.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bpe_json.h"
#include "common/temp_dir.h"
#include "data/bpe_tokenizer.h"
#include "runtime/error.h"

namespace trainer::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Ids;
using testing::ids_of;
using trainer::testing::TempDir;
using testing::operator+;
using testing::byte_char;
using testing::tokenizer_json;
using testing::vocab_json;

// Tokens 256.. of the main test vocabulary, and its merges by rank.
const std::vector<std::string> kTokens = {"bc", "ab", "abc", "aa", "Ġa", "yz", "<|endoftext|>"};
const std::vector<std::string> kMerges = {"b c", "a b", "a bc", "a a", "Ġ a", "y z"};
constexpr int32_t kBc = 256, kAb = 257, kAbc = 258, kAa = 259, kYz = 261, kEot = 262;

json with_eot(json j) {
  j["added_tokens"] = json::array({testing::added_token(kEot, "<|endoftext|>")});
  return j;
}

void write(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

BpeTokenizer from_json(const json& j) {
  return BpeTokenizer(j.dump(), "test.json");
}

TEST(BpeTokenizer, MergesApplyByRankNotByPosition) {
  BpeTokenizer tok = from_json(tokenizer_json(kTokens, kMerges));
  // "b c" (rank 0) first, then "a bc" (rank 2): never "a b" (rank 1), which would strand c.
  EXPECT_EQ(tok.encode("abc"), Ids({kAbc}));
  EXPECT_EQ(tok.encode(" abc"), Ids({' ', kAbc}));  // "Ġ a" cannot apply once a is merged
  EXPECT_EQ(tok.encode("aaa"), Ids({kAa, 'a'}));    // equal ranks: the leftmost first
  EXPECT_EQ(tok.encode("aaaa"), Ids({kAa, kAa}));
  EXPECT_EQ(tok.encode(" a"), Ids({260}));
  // The same tokens with "a b" ranked first: ab then c, which no merge joins.
  std::vector<std::string> reordered = {"a b", "b c", "a bc", "a a", "Ġ a", "y z"};
  BpeTokenizer other = from_json(tokenizer_json(kTokens, reordered));
  EXPECT_EQ(other.encode("abc"), Ids({kAb, 'c'}));
  EXPECT_NE(other.hash(), tok.hash());
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(BpeTokenizer, MergesAsPairsReadLikeStrings) {
  json pairs = tokenizer_json(kTokens, {});
  for (const std::string& m : kMerges)
    pairs["model"]["merges"].push_back({m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)});
  BpeTokenizer a = from_json(pairs), b = from_json(tokenizer_json(kTokens, kMerges));
  EXPECT_EQ(a.canonical_json(), b.canonical_json());
  EXPECT_EQ(a.encode("abc aaa"), b.encode("abc aaa"));
}

// The plain definition of BPE: merge the lowest-ranked adjacent pair, leftmost first, until
// no pair has a merge.
Ids reference_bpe(std::string_view piece,
                  const std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>>& merges) {
  Ids ids = ids_of(piece);
  for (;;) {
    size_t best = ids.size();
    int best_rank = 1 << 30;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = merges.find({ids[i], ids[i + 1]});
      if (it != merges.end() && it->second.first < best_rank)
        best = i, best_rank = it->second.first;
    }
    if (best == ids.size()) return ids;
    ids[best] = merges.at({ids[best], ids[best + 1]}).second;
    ids.erase(ids.begin() + ptrdiff_t(best) + 1);
  }
}

TEST(BpeTokenizer, ShortAndLongPiecesMergeAsTheDefinitionSays) {
  // Tokens over a and b whose merges overlap in every way; pieces of 1 to 700 letters take
  // both the scanning merge loop (up to 128 bytes) and the heap (beyond).
  std::vector<std::string> tokens = {"aa",   "ab",   "ba",  "bb",  "aab",  "aba",  "abab",
                                     "aaaa", "baab", "bbb", "abb", "aabb", "bbbb", "abba"};
  std::vector<std::string> merges = {"a a",   "a b",   "b a",  "b b",  "aa b",  "ab a",  "ab ab",
                                     "aa aa", "ba ab", "bb b", "ab b", "aa bb", "bb bb", "ab ba"};
  std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>> table;
  std::map<std::string, int32_t> id;
  for (int c : {'a', 'b'}) id[std::string(1, char(c))] = c;
  for (size_t i = 0; i < tokens.size(); ++i) id[tokens[i]] = 256 + int(i);
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string a = merges[r].substr(0, merges[r].find(' ')), b = merges[r].substr(a.size() + 1);
    table[{id.at(a), id.at(b)}] = {int(r), id.at(a + b)};
  }
  BpeTokenizer tok = from_json(tokenizer_json(tokens, merges));
  std::mt19937 rng(5);
  for (int n = 1; n <= 700; n += 1 + n / 20) {
    for (int rep = 0; rep < 4; ++rep) {
      std::string s;
      int skew = int(rng() % 4);  // runs of one letter, or mixed
      for (int i = 0; i < n; ++i) s += (rng() % 4 < unsigned(skew) ? 'a' : "ab"[rng() % 2]);
      ASSERT_EQ(tok.encode(s), reference_bpe(s, table)) << s;
      ASSERT_EQ(tok.decode(tok.encode(s)), s);
    }
  }
}

TEST(BpeTokenizer, IgnoreMergesEmitsAWholeTokenPieceDirectly) {
  std::vector<std::string> tokens = kTokens;
  tokens.push_back("xyz");  // no merge makes it
  json j = tokenizer_json(tokens, kMerges);
  EXPECT_EQ(from_json(j).encode("xyz"), Ids({'x', kYz}));
  j["model"]["ignore_merges"] = true;
  BpeTokenizer tok = from_json(j);
  EXPECT_EQ(tok.encode("xyz"), Ids({263}));
  EXPECT_EQ(tok.encode(" xyz"), Ids({' ', 'x', kYz}));  // the piece " xyz" is not a token
  EXPECT_EQ(tok.encode("abc"), Ids({kAbc}));
}

TEST(BpeTokenizer, SpecialsDecodeButTextNeverEncodesToThem) {
  BpeTokenizer tok = from_json(with_eot(tokenizer_json(kTokens, kMerges)));
  EXPECT_EQ(tok.vocab_size(), kEot + 1);
  EXPECT_EQ(tok.eos_id(), kEot);
  EXPECT_EQ(tok.bos_id(), kEot);  // GPT-2: one token for both
  EXPECT_EQ(tok.decode(Ids{kAbc, kEot, ' ', kAa}), "abc<|endoftext|> aa");
  Ids ids = tok.encode("x<|endoftext|>y");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kEot), 0);
  EXPECT_EQ(tok.decode(ids), "x<|endoftext|>y");

  // Llama-3's names, as added tokens outside the vocabulary.
  json j = tokenizer_json({"ab"}, {"a b"});
  j["added_tokens"] =
      json::array({{{"id", 300}, {"content", "<|begin_of_text|>"}, {"special", true}},
                   {{"id", 301}, {"content", "<|end_of_text|>"}, {"special", true}},
                   {{"id", 310}, {"content", "  x"}, {"special", false}}});
  BpeTokenizer llama = from_json(j);
  EXPECT_EQ(llama.bos_id(), 300);
  EXPECT_EQ(llama.eos_id(), 301);
  EXPECT_EQ(llama.vocab_size(), 311);  // the largest id, 310, and one
  EXPECT_EQ(llama.decode(Ids{300, 'a', 310, 301}), "<|begin_of_text|>a  x<|end_of_text|>");
  EXPECT_EQ(from_json(tokenizer_json(kTokens, kMerges)).eos_id(), 262);  // in the vocabulary
  EXPECT_EQ(from_json(tokenizer_json({"ab"}, {"a b"})).eos_id(), -1);
  EXPECT_EQ(from_json(tokenizer_json({"ab"}, {"a b"})).bos_id(), -1);
}

TEST(BpeTokenizer, AddedTokensThatAreNotSpecialAreFoundInTheText) {
  // GPT-NeoX's runs of spaces: the leftmost match, then the longest, before pre-tokenization.
  json j = with_eot(tokenizer_json(kTokens, kMerges));
  j["added_tokens"].push_back({{"id", 300}, {"content", "  "}, {"special", false}});
  j["added_tokens"].push_back({{"id", 301}, {"content", "   "}, {"special", false}});
  BpeTokenizer tok = from_json(j);
  EXPECT_EQ(tok.encode("a    abc"), Ids({'a', 301, ' ', kAbc}));
  EXPECT_EQ(tok.encode("abc  \xff  abc"), Ids({kAbc, 300, 0xff, 300, kAbc}));
  EXPECT_EQ(tok.encode("a<|endoftext|>"), tok.encode("a") + tok.encode("<|endoftext|>"));
  EXPECT_EQ(tok.decode(tok.encode(" a     b  ")), " a     b  ");
  EXPECT_EQ(tok.vocab_size(), 302);  // the largest id, 301, and one
  json canonical = json::parse(tok.canonical_json());
  EXPECT_EQ(canonical["added_tokens"][1]["special"], false);
}

TEST(BpeTokenizer, DecodeRefusesAnIdThatNamesNoToken) {
  json j = tokenizer_json(kTokens, kMerges);
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}}});
  BpeTokenizer tok = from_json(j);
  EXPECT_EQ(tok.vocab_size(), 301);  // the largest id, 300, and one
  for (int32_t bad : {-1, 290, 301, 1 << 30}) {
    try {
      tok.decode(Ids{'a', bad});
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
    }
  }
}

// Random byte strings: mostly invalid UTF-8, some valid characters of every length, text.
std::vector<std::string> random_strings() {
  std::mt19937 rng(11);
  const char* valid[] = {"a", " ", "é", "€", "😀", "中", "\r\n", "'s", "12", "  ", "\xc2\x85"};
  std::vector<std::string> out = {
      "",         "\xff",   "\xc0\x80",     "\xed\xa0\x80",     "\xf4\x90\x80\x80",
      "\xe2\x82", "a\x80z", "\xf0\x9f\x98", " \xe2\x82\xac\xe2"};
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (int n = int(rng() % 60); n > 0; --n) {
      if (rng() % 3 == 0)
        s += valid[rng() % (sizeof valid / sizeof *valid)];
      else
        s += char(rng() % 4 ? rng() % 256 : 0x80 + rng() % 64);
    }
    out.push_back(s);
  }
  return out;
}

json split_tokenizer(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                     const std::string& pattern) {
  json j = tokenizer_json(tokens, merges);
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", pattern}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["model"]["ignore_merges"] = true;
  return j;
}

const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TEST(BpeTokenizer, InvalidUtf8BytesArePiecesOfTheirOwn) {
  BpeTokenizer tok = from_json(tokenizer_json(kTokens, kMerges));
  // Note [Invalid UTF-8]: "\xff" cuts the text; the runs either side are encoded on their own.
  EXPECT_EQ(tok.encode(std::string("abc\xff") + "abc"), Ids({kAbc, 0xff, kAbc}));
  EXPECT_EQ(tok.encode(std::string("ab\xc3") + "bc"), Ids({kAb, 0xc3, kBc}));  // truncated
  EXPECT_EQ(tok.encode("\xed\xa0\x80"), ids_of("\xed\xa0\x80"));  // a surrogate: three bytes
  EXPECT_EQ(tok.encode("\xc0\xaf"), ids_of("\xc0\xaf"));          // overlong
  EXPECT_EQ(tok.encode("\xf4\x90\x80\x80"), ids_of("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_EQ(tok.encode("é"), ids_of("é"));  // valid: its two bytes, unmerged here
}

TEST(BpeTokenizer, DecodeInvertsEncodeOnAnyBytes) {
  BpeTokenizer gpt2 = from_json(tokenizer_json(kTokens, kMerges));
  BpeTokenizer llama = from_json(split_tokenizer(kTokens, kMerges, kLlama3Pattern));
  std::vector<std::string> inputs = random_strings();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(gpt2.decode(gpt2.encode(inputs[i])), inputs[i]) << "string " << i;
    ASSERT_EQ(llama.decode(llama.encode(inputs[i])), inputs[i]) << "string " << i;
  }
}

TEST(BpeTokenizer, EncodesTheSameFromManyThreads) {
  BpeTokenizer tok = from_json(split_tokenizer(kTokens, kMerges, kLlama3Pattern));
  std::vector<std::string> inputs = random_strings();
  std::vector<Ids> expected;
  for (const std::string& s : inputs) expected.push_back(tok.encode(s));
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < inputs.size(); ++i)
          failures[size_t(t)] += tok.encode(inputs[i]) != expected[i];
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST(BpeTokenizer, NfcNormalizerComposesFirst) {
  json j = tokenizer_json({"\xc3\x83\xc2\xa9"}, {"Ã ©"});  // é's bytes C3 A9 merged
  j["normalizer"] = {{"type", "NFC"}};
  BpeTokenizer tok = from_json(j);
  EXPECT_EQ(tok.encode("e\xcc\x81"), Ids({256}));  // e + combining acute -> é
  EXPECT_EQ(tok.encode("é"), Ids({256}));
  EXPECT_EQ(tok.decode(tok.encode("cafe\xcc\x81\xff!")), "café\xff!");
  EXPECT_NE(tok.hash(), from_json(tokenizer_json({"\xc3\x83\xc2\xa9"}, {"Ã ©"})).hash());
}

TEST(BpeTokenizer, SplitPatternsCutAsTiktokenDoes) {
  BpeTokenizer tok = from_json(split_tokenizer(kTokens, kMerges, kLlama3Pattern));
  // \p{N}{1,3}: digits three at a time; 'S matches case-insensitively.
  EXPECT_EQ(tok.encode("12345"), ids_of("12345"));
  EXPECT_EQ(tok.decode(tok.encode("IT'S 1234567 ab\r\n\r\n  x")), "IT'S 1234567 ab\r\n\r\n  x");
  // U+180E (E1 A0 8E) is no white space to tiktoken: " \u180e" is one piece, so the space
  // and E1 (byte character á) merge; were it white space, " " would be a piece of its own.
  for (json j : {tokenizer_json({"Ġá"}, {"Ġ á"}), split_tokenizer({"Ġá"}, {"Ġ á"}, kLlama3Pattern)})
    EXPECT_EQ(from_json(j).encode("a \xe1\xa0\x8e"
                                  "b"),
              Ids({'a', 256, 0xa0, 0x8e, 'b'}));
  // A literal String pattern cuts at each occurrence and keeps it as a piece.
  json lit = tokenizer_json({"ab"}, {"a b"});
  lit["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "b"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(from_json(lit).encode("abab"), Ids({'a', 'b', 'a', 'b'}));
  lit["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "x"}};
  EXPECT_EQ(from_json(lit).encode("abab"), Ids({256, 256}));
}

TEST(BpeTokenizer, ThreeFileFormsGiveOneCanonicalJson) {
  TempDir dir("bpe_forms");
  json j = with_eot(tokenizer_json(kTokens, kMerges));
  fs::create_directories(dir.path / "hf");
  write(dir.path / "hf" / "tokenizer.json", j.dump(2));
  fs::create_directories(dir.path / "vocab");
  std::string merges_txt = "#version: 0.2\n";
  for (const std::string& m : kMerges) merges_txt += m + "\n";
  write(dir.path / "vocab" / "vocab.json", vocab_json(kTokens).dump());
  write(dir.path / "vocab" / "merges.txt", merges_txt);
  fs::create_directories(dir.path / "openai");
  write(dir.path / "openai" / "encoder.json", vocab_json(kTokens).dump(1));
  write(dir.path / "openai" / "vocab.bpe", merges_txt + "\n");
  BpeTokenizer hf_folder(dir.path / "hf");
  BpeTokenizer hf_file(dir.path / "hf" / "tokenizer.json");
  BpeTokenizer vocab(dir.path / "vocab");
  BpeTokenizer openai(dir.path / "openai");
  // ByteLevel's regex written as an explicit Split is the same pre-tokenization.
  json split = split_tokenizer(
      kTokens, kMerges,
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  split["model"]["ignore_merges"] = false;
  BpeTokenizer via_split = from_json(with_eot(split));
  for (const BpeTokenizer* t : {&hf_file, &vocab, &openai, &via_split}) {
    EXPECT_EQ(t->canonical_json(), hf_folder.canonical_json());
    EXPECT_EQ(t->hash(), hf_folder.hash());
    EXPECT_EQ(t->eos_id(), kEot);
  }
  uint64_t fnv = 0xCBF29CE484222325ull;
  for (char c : hf_folder.canonical_json()) fnv = (fnv ^ uint8_t(c)) * 0x100000001B3ull;
  EXPECT_EQ(hf_folder.hash(), fnv);
  // The canonical JSON reads back to itself, and is a valid tokenizer.json.
  BpeTokenizer again(hf_folder.canonical_json(), "canonical.json");
  EXPECT_EQ(again.canonical_json(), hf_folder.canonical_json());
  json canonical = json::parse(hf_folder.canonical_json());
  EXPECT_EQ(canonical["model"]["type"], "BPE");
  EXPECT_EQ(canonical["model"]["merges"][0], "b c");
  EXPECT_EQ(canonical["added_tokens"][0]["content"], "<|endoftext|>");
  for (std::string_view s : {"abc aaa", "x<|endoftext|>", " \t\n 12"})
    EXPECT_EQ(again.encode(s), hf_folder.encode(s));
  // Different special tokens, pre-tokenization or normalizer: a different identity.
  EXPECT_NE(from_json(tokenizer_json(kTokens, kMerges)).hash(), hf_folder.hash());
  EXPECT_NE(from_json(split_tokenizer(kTokens, kMerges, kLlama3Pattern)).hash(), hf_folder.hash());
}

// The message reading `path` fails with, or "accepted".
std::string refusal(const fs::path& path) {
  try {
    BpeTokenizer tok(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

// Expects reading `content` as a tokenizer.json file to fail naming the file and `field`.
void expect_refused(const json& content, const std::string& field, const std::string& also = "") {
  TempDir dir("bpe_refuse");
  write(dir.path / "tokenizer.json", content.dump());
  std::string what = refusal(dir.path);
  EXPECT_NE(what.find((dir.path / "tokenizer.json").string() + ": " + field), std::string::npos)
      << what;
  EXPECT_NE(what.find(also), std::string::npos) << what;
}

TEST(BpeTokenizer, RefusesWhatItDoesNotImplement) {
  const json base = tokenizer_json(kTokens, kMerges);
  auto with = [&](const json::json_pointer& at, json value) {
    json j = base;
    j[at] = std::move(value);
    return j;
  };
  using P = json::json_pointer;
  expect_refused(with(P("/model/dropout"), 0.1), "model.dropout");
  expect_refused(with(P("/model/byte_fallback"), true), "model.byte_fallback");
  expect_refused(with(P("/model/continuing_subword_prefix"), "##"),
                 "model.continuing_subword_prefix");
  expect_refused(with(P("/model/end_of_word_suffix"), "</w>"), "model.end_of_word_suffix");
  expect_refused(with(P("/model/type"), "WordPiece"), "model.type", "WordPiece");
  expect_refused(with(P("/normalizer"), {{"type", "Lowercase"}}), "normalizer", "Lowercase");
  expect_refused(with(P("/pre_tokenizer"), nullptr), "pre_tokenizer");
  expect_refused(with(P("/pre_tokenizer"), {{"type", "Whitespace"}}), "pre_tokenizer.type",
                 "Whitespace");
  expect_refused(with(P("/pre_tokenizer/add_prefix_space"), true),
                 "pre_tokenizer.add_prefix_space");
  expect_refused(with(P("/decoder"), {{"type", "WordPiece"}}), "decoder", "WordPiece");
  json lstrip = base;
  lstrip["added_tokens"] = {{{"id", 300}, {"content", "x"}, {"special", false}, {"lstrip", true}}};
  expect_refused(lstrip, "added_tokens[0].lstrip");
  json empty = base;
  empty["added_tokens"] = {{{"id", 300}, {"content", ""}, {"special", true}}};
  expect_refused(empty, "added_tokens[0].content", "empty");
  json split = split_tokenizer(kTokens, kMerges, kLlama3Pattern);
  json removed = split;
  removed["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_refused(removed, "pre_tokenizer.pretokenizers[0].behavior", "Removed");
  json inverted = split;
  inverted["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  expect_refused(inverted, "pre_tokenizer.pretokenizers[0].invert");
  json bad_regex = split;
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_refused(bad_regex, "pre_tokenizer", "(unclosed");
  json no_byte_level = split;
  no_byte_level["pre_tokenizer"]["pretokenizers"].erase(1);
  expect_refused(no_byte_level, "pre_tokenizer", "ByteLevel");
  json byte_level_first = split;
  std::swap(byte_level_first["pre_tokenizer"]["pretokenizers"][0],
            byte_level_first["pre_tokenizer"]["pretokenizers"][1]);
  expect_refused(byte_level_first, "pre_tokenizer.pretokenizers[1]", "ByteLevel");
}

TEST(BpeTokenizer, RefusesMalformedContent) {
  const json base = tokenizer_json(kTokens, kMerges);
  json j = base;
  j["model"]["merges"][2] = "a  bc";
  expect_refused(j, "model.merges[2]");
  j = base;
  j["model"]["merges"][3] = "a qq";
  expect_refused(j, "model.merges[3]", "\"qq\" is not in the vocabulary");
  j = base;
  j["model"]["merges"].push_back("c a");
  expect_refused(j, "model.merges[6]", "\"ca\"");
  j = base;
  j["model"]["merges"][1] = json::array({"a"});
  expect_refused(j, "model.merges[1]");
  j = base;
  j["model"]["vocab"].erase(byte_char(0));
  expect_refused(j, "model.vocab", "byte 0x00");
  j = base;
  j["model"]["vocab"]["zz"] = 3;
  expect_refused(j, "model.vocab", "id 3");
  j = base;
  j["model"]["vocab"]["zz"] = -4;
  expect_refused(j, "model.vocab");
  j = base;
  j["model"]["vocab"]["zz"] = "7";
  expect_refused(j, "model.vocab[\"zz\"]");
  j = base;
  j["model"].erase("vocab");
  expect_refused(j, "model.vocab");
  j = base;
  j["added_tokens"] = json::array({{{"id", kAbc}, {"content", "<s>"}}});
  expect_refused(j, "added_tokens[0]", "abc");
  j = base;
  j["added_tokens"] = json::array({{{"id", 400}, {"content", "abc"}}});
  expect_refused(j, "added_tokens[0]", "abc");
  j = base;
  j["added_tokens"] = json::array({{{"content", "<s>"}}});
  expect_refused(j, "added_tokens[0].id");
  j = base;
  j.erase("model");
  expect_refused(j, "model");
  expect_refused(json::array(), "(top level)");

  TempDir dir("bpe_malformed");
  write(dir.path / "tokenizer.json", R"({"model": {"type": "BPE", "vocab": {)");
  std::string malformed = refusal(dir.path / "tokenizer.json");
  EXPECT_NE(malformed.find("tokenizer.json: malformed JSON"), std::string::npos) << malformed;
  EXPECT_THROW(BpeTokenizer("{", "inline.json"), Error);
}

TEST(BpeTokenizer, RefusesIncompleteFolders) {
  TempDir dir("bpe_folders");
  EXPECT_NE(refusal(dir.path).find("holds no tokenizer.json"), std::string::npos);
  EXPECT_NE(refusal(dir.path / "absent").find("no such file"), std::string::npos);
  write(dir.path / "vocab.json", vocab_json(kTokens).dump());
  std::string missing = refusal(dir.path);
  EXPECT_NE(missing.find((dir.path / "merges.txt").string()), std::string::npos) << missing;
  EXPECT_NE(missing.find("missing"), std::string::npos) << missing;
  write(dir.path / "merges.txt", "#version: 0.2\nb c\na\n");
  std::string bad_line = refusal(dir.path);
  EXPECT_NE(bad_line.find("merges.txt: line 3"), std::string::npos) << bad_line;
  write(dir.path / "merges.txt", "b c\na qq\n");
  std::string unknown = refusal(dir.path);
  EXPECT_NE(unknown.find("merges.txt: line 2"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("\"qq\" is not in the vocabulary"), std::string::npos) << unknown;
  write(dir.path / "merges.txt", "b c\n");
  write(dir.path / "vocab.json", "[1, 2]");
  std::string not_object = refusal(dir.path);
  EXPECT_NE(not_object.find("vocab.json"), std::string::npos) << not_object;
}

}  // namespace
}  // namespace trainer::data
