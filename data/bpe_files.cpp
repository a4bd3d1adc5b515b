// Reading a byte-level BPE tokenizer's Hugging Face files into a bpe::Spec, refusing what the
// encoder does not implement, and writing the canonical tokenizer.json.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/bpe_internal.h"
#include "data/bpe_tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::data::bpe {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Where a message points: the file and, once set, the field or line.
struct Where {
  fs::path file;
  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    THROW_ERROR("{}: {}: {}", file.string(), field, what);
  }
  void expect(bool ok, std::string_view field, std::string_view what) const {
    if (!ok) [[unlikely]]
      fail(field, what);
  }
};

const json* member(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// A token as a JSON string, quoted and escaped (for messages and the canonical JSON).
std::string shown(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// A JSON value as a token id (an integer from 0 to 2^31 - 2), or -1.
int32_t as_id(const json& v) {
  bool ok = v.is_number_unsigned() && v.get<uint64_t>() < uint64_t(INT32_MAX);
  return ok ? int32_t(v.get<uint64_t>()) : -1;
}

// A vocabulary (token -> id) as Spec::vocab, refusing an id used twice.
std::vector<std::pair<int32_t, std::string>> read_vocab(const json& v, const Where& at,
                                                        std::string_view field) {
  at.expect(v.is_object(), field, fmt::format("is {}, not an object", v.type_name()));
  std::vector<std::pair<int32_t, std::string>> vocab;
  vocab.reserve(v.size());
  for (const auto& [token, id] : v.items()) {
    int32_t i = as_id(id);
    if (i < 0)
      at.fail(fmt::format("{}[{}]", field, shown(token)),
              fmt::format("{} is not an id (an integer from 0 to 2^31 - 2)", id.dump()));
    vocab.emplace_back(i, token);
  }
  std::sort(vocab.begin(), vocab.end());
  for (size_t i = 1; i < vocab.size(); ++i)
    if (vocab[i].first == vocab[i - 1].first)
      at.fail(field, fmt::format("id {} is both {} and {}", vocab[i].first,
                                 shown(vocab[i - 1].second), shown(vocab[i].second)));
  return vocab;
}

// Checks that every byte has a token and resolves the merges (token pairs, at `where(i)`) to
// ids. A pair listed twice keeps its last rank, as Hugging Face's map of merges does.
template <typename WhereMerge>
void resolve_merges(Spec& spec, const std::vector<std::pair<std::string, std::string>>& merges,
                    const Where& at, std::string_view vocab_field, const Where& merges_at,
                    WhereMerge where) {
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(spec.vocab.size());
  for (const auto& [id, token] : spec.vocab) ids.emplace(token, id);
  for (int b = 0; b < 256; ++b)
    if (!ids.contains(byte_char(uint8_t(b))))
      at.fail(vocab_field,
              fmt::format("has no token for byte 0x{:02x} ({}): byte-level BPE needs all 256", b,
                          shown(byte_char(uint8_t(b)))));
  std::vector<std::pair<int32_t, int32_t>> resolved(merges.size());
  std::unordered_map<uint64_t, size_t> last;
  last.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    auto ia = ids.find(a), ib = ids.find(b);
    if (ia == ids.end() || ib == ids.end())
      merges_at.fail(where(i),
                     fmt::format("{} is not in the vocabulary", shown(ia == ids.end() ? a : b)));
    joined.assign(a).append(b);
    if (!ids.contains(joined))
      merges_at.fail(
          where(i), fmt::format("{} (the merge's result) is not in the vocabulary", shown(joined)));
    resolved[i] = {ia->second, ib->second};
    last[(uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second)] = i;
  }
  spec.merges.clear();
  spec.merges.reserve(last.size());
  for (size_t i = 0; i < resolved.size(); ++i) {
    auto [a, b] = resolved[i];
    if (last[(uint64_t(uint32_t(a)) << 32) | uint32_t(b)] == i) spec.merges.push_back(resolved[i]);
  }
}

void parse_pre_tokenizer(const json& p, const std::string& field, const Where& at, Spec& spec,
                         bool& byte_level) {
  at.expect(p.is_object(), field, fmt::format("is {}, not an object", p.type_name()));
  const json* type = member(p, "type");
  at.expect(type && type->is_string(), field + ".type", "missing or not a string");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "Sequence") {
    const json* list = member(p, "pretokenizers");
    at.expect(list && list->is_array(), field + ".pretokenizers", "missing or not an array");
    for (size_t i = 0; i < list->size(); ++i)
      parse_pre_tokenizer((*list)[i], fmt::format("{}.pretokenizers[{}]", field, i), at, spec,
                          byte_level);
    return;
  }
  at.expect(!byte_level, field, "comes after ByteLevel (which must be the last step)");
  if (t == "ByteLevel") {
    const json* prefix = member(p, "add_prefix_space");
    at.expect(!prefix || prefix->is_null() || *prefix == false, field + ".add_prefix_space",
              fmt::format("{} is not supported (only false)", prefix ? prefix->dump() : ""));
    const json* regex = member(p, "use_regex");  // Hugging Face's default: true
    at.expect(!regex || regex->is_boolean(), field + ".use_regex", "is not a boolean");
    if (!regex || *regex == true) spec.splits.push_back({std::string(kGpt2Pattern), false});
    byte_level = true;
  } else if (t == "Split") {
    const json* pattern = member(p, "pattern");
    at.expect(pattern && pattern->is_object() && pattern->size() == 1, field + ".pattern",
              "is not an object with one member, Regex or String");
    const json* regex = member(*pattern, "Regex");
    const json* literal = member(*pattern, "String");
    const json* value = regex ? regex : literal;
    at.expect(value && value->is_string(), field + ".pattern",
              "has no Regex or String member that is a string");
    const json* behavior = member(p, "behavior");
    at.expect(behavior && *behavior == "Isolated", field + ".behavior",
              fmt::format("{} is not supported (only \"Isolated\")",
                          behavior ? behavior->dump() : "missing"));
    const json* invert = member(p, "invert");
    at.expect(!invert || *invert == false, field + ".invert",
              fmt::format("{} is not supported (only false)", invert ? invert->dump() : ""));
    spec.splits.push_back({value->get<std::string>(), literal != nullptr});
  } else {
    at.fail(field + ".type",
            fmt::format("{} is not supported (only ByteLevel, Split and Sequence)", shown(t)));
  }
}

// Vocabulary entries that are neither a byte nor a merge's result cannot come out of BPE: in
// vocab.json / encoder.json they are the special tokens (GPT-2's <|endoftext|>).
void add_unreachable_as_special(Spec& spec) {
  std::vector<bool> produced;
  std::unordered_map<std::string_view, int32_t> ids;
  for (const auto& [id, token] : spec.vocab) ids.emplace(token, id);
  int32_t max_id = spec.vocab.empty() ? 0 : spec.vocab.back().first;
  produced.assign(size_t(max_id) + 1, false);
  for (int b = 0; b < 256; ++b) produced[size_t(ids.at(byte_char(uint8_t(b))))] = true;
  std::vector<std::string_view> by_id(produced.size());
  for (const auto& [id, token] : spec.vocab) by_id[size_t(id)] = token;
  std::string joined;
  for (const auto& [a, b] : spec.merges) {
    joined.assign(by_id[size_t(a)]).append(by_id[size_t(b)]);
    produced[size_t(ids.at(joined))] = true;
  }
  for (const auto& [id, token] : spec.vocab)
    if (!produced[size_t(id)]) spec.added.push_back({id, token, true});
}

// added_tokens: each either a vocabulary token under its own id, or a new id.
void read_added_tokens(const json& root, const Where& at, Spec& spec) {
  const json* added = member(root, "added_tokens");
  if (!added || added->is_null()) return;
  at.expect(added->is_array(), "added_tokens", "is not an array");
  std::unordered_map<std::string_view, int32_t> ids;
  std::unordered_map<int32_t, std::string_view> tokens;
  for (const auto& [id, token] : spec.vocab) ids.emplace(token, id), tokens.emplace(id, token);
  for (size_t i = 0; i < added->size(); ++i) {
    const json& a = (*added)[i];
    std::string field = fmt::format("added_tokens[{}]", i);
    at.expect(a.is_object(), field, "is not an object");
    const json* id = member(a, "id");
    const json* content = member(a, "content");
    const json* special = member(a, "special");
    at.expect(id && as_id(*id) >= 0, field + ".id",
              fmt::format("{} is not an id (an integer from 0 to 2^31 - 2)",
                          id ? id->dump() : "missing"));
    at.expect(content && content->is_string(), field + ".content", "missing or not a string");
    at.expect(!special || special->is_boolean(), field + ".special", "is not a boolean");
    AddedToken t{as_id(*id), content->get<std::string>(), !special || *special == true};
    at.expect(!t.content.empty(), field + ".content", "is empty");
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {  // how HF matches it in text
      const json* f = member(a, flag);
      at.expect(t.special || !f || *f == false, fmt::format("{}.{}", field, flag),
                "true is not supported on a token that is not special (encode matches those)");
    }
    auto same_id = tokens.find(t.id);
    if (same_id != tokens.end() && same_id->second != t.content)
      at.fail(field, fmt::format("id {} is {} in model.vocab, not {}", t.id, shown(same_id->second),
                                 shown(t.content)));
    auto same_content = ids.find(t.content);
    if (same_content != ids.end() && same_content->second != t.id)
      at.fail(field, fmt::format("{} is id {} in model.vocab, not {}", shown(t.content),
                                 same_content->second, t.id));
    spec.added.push_back(std::move(t));
  }
  std::sort(spec.added.begin(), spec.added.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  for (size_t i = 1; i < spec.added.size(); ++i)
    at.expect(spec.added[i].id != spec.added[i - 1].id, "added_tokens",
              fmt::format("id {} is given twice", spec.added[i].id));
}

// Refuses ids so sparse that the tables by id would be mostly holes: a malformed file.
void check_ids(const Spec& spec, const Where& at, std::string_view field) {
  int64_t max_id = spec.vocab.empty() ? -1 : spec.vocab.back().first;
  if (!spec.added.empty()) max_id = std::max<int64_t>(max_id, spec.added.back().id);
  size_t count = spec.vocab.size() + spec.added.size();
  at.expect(max_id < int64_t(2 * count + 1024), field,
            fmt::format("ids reach {} for {} tokens: too sparse", max_id, count));
}

// merges.txt / vocab.bpe: an optional "#version" first line, then "a b" per line.
std::vector<std::pair<std::string, std::string>> read_merges_txt(const fs::path& path,
                                                                 std::vector<size_t>& lines) {
  std::string text = read_file(path);
  std::vector<std::pair<std::string, std::string>> merges;
  size_t pos = 0, line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view l(text.data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty() || (line == 1 && l.starts_with("#version"))) continue;
    size_t space = l.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == l.size() ||
        l.find(' ', space + 1) != std::string_view::npos)
      THROW_ERROR("{}: line {}: {} is not a merge (two tokens separated by one space)",
                  path.string(), line, shown(l));
    merges.emplace_back(l.substr(0, space), l.substr(space + 1));
    lines.push_back(line);
  }
  return merges;
}

// vocab.json + merges.txt (or encoder.json + vocab.bpe): GPT-2's pre-tokenization, no
// normalizer; the specials are the tokens BPE cannot produce.
Spec read_vocab_merges(const fs::path& vocab_path, const fs::path& merges_path) {
  std::error_code ec;
  CHECK(fs::is_regular_file(merges_path, ec), "{}: missing ({} needs it beside it)",
        merges_path.string(), vocab_path.filename().string());
  Where at{vocab_path};
  json v;
  try {
    v = json::parse(read_file(vocab_path));
  } catch (const json::parse_error& e) {
    THROW_ERROR("{}: malformed JSON: {}", vocab_path.string(), e.what());
  }
  Spec spec;
  spec.from = vocab_path;
  spec.vocab = read_vocab(v, at, "(top level)");
  std::vector<size_t> lines;
  auto merges = read_merges_txt(merges_path, lines);
  Where merges_at{merges_path};
  resolve_merges(spec, merges, at, "(top level)", merges_at,
                 [&](size_t i) { return fmt::format("line {}", lines[i]); });
  spec.splits.push_back({std::string(kGpt2Pattern), false});
  check_ids(spec, at, "(top level)");
  add_unreachable_as_special(spec);
  return spec;
}

}  // namespace

Spec parse_tokenizer_json(std::string_view text, const fs::path& from) {
  Where at{from};
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    THROW_ERROR("{}: malformed JSON: {}", from.string(), e.what());
  }
  at.expect(root.is_object(), "(top level)", fmt::format("is {}, not an object", root.type_name()));
  Spec spec;
  spec.from = from;

  const json* model = member(root, "model");
  at.expect(model && model->is_object(), "model", "missing or not an object");
  const json& m = *model;
  const json* type = member(m, "type");
  at.expect(!type || *type == "BPE", "model.type",
            fmt::format("{} is not supported (only \"BPE\")", type ? type->dump() : ""));
  const json* dropout = member(m, "dropout");
  at.expect(!dropout || dropout->is_null(), "model.dropout",
            fmt::format("{} is not supported (only null)", dropout ? dropout->dump() : ""));
  const json* fallback = member(m, "byte_fallback");
  at.expect(!fallback || fallback->is_null() || *fallback == false, "model.byte_fallback",
            fmt::format("{} is not supported (only false)", fallback ? fallback->dump() : ""));
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* a = member(m, affix);
    at.expect(!a || a->is_null() || *a == "", fmt::format("model.{}", affix),
              fmt::format("{} is not supported (only null or \"\")", a ? a->dump() : ""));
  }
  const json* unk = member(m, "unk_token");  // never used: every byte has a token
  at.expect(!unk || unk->is_null() || unk->is_string(), "model.unk_token", "is not a string");
  const json* ignore = member(m, "ignore_merges");
  at.expect(!ignore || ignore->is_null() || ignore->is_boolean(), "model.ignore_merges",
            "is not a boolean");
  spec.ignore_merges = ignore && *ignore == true;

  const json* vocab = member(m, "vocab");
  at.expect(vocab != nullptr, "model.vocab", "missing");
  spec.vocab = read_vocab(*vocab, at, "model.vocab");
  const json* merges_json = member(m, "merges");
  at.expect(merges_json && merges_json->is_array(), "model.merges", "missing or not an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json->size());
  for (size_t i = 0; i < merges_json->size(); ++i) {
    const json& e = (*merges_json)[i];
    std::string field = fmt::format("model.merges[{}]", i);
    if (e.is_string()) {  // "a b"
      const std::string& s = e.get_ref<const std::string&>();
      size_t space = s.find(' ');
      at.expect(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                    s.find(' ', space + 1) == std::string::npos,
                field, fmt::format("{} is not two tokens separated by one space", e.dump()));
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {  // ["a", "b"]
      at.expect(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), field,
                fmt::format("{} is not \"a b\" nor [\"a\", \"b\"]", e.dump()));
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
  resolve_merges(spec, merges, at, "model.vocab", at,
                 [](size_t i) { return fmt::format("model.merges[{}]", i); });

  const json* normalizer = member(root, "normalizer");
  if (normalizer && !normalizer->is_null()) {
    const json* t = normalizer->is_object() ? member(*normalizer, "type") : nullptr;
    at.expect(
        t && *t == "NFC", "normalizer",
        fmt::format("{} is not supported (only null or NFC)", t ? t->dump() : normalizer->dump()));
    spec.nfc = true;
  }
  const json* pre = member(root, "pre_tokenizer");
  at.expect(pre && !pre->is_null(), "pre_tokenizer",
            "null is not supported (byte-level BPE needs ByteLevel)");
  bool byte_level = false;
  parse_pre_tokenizer(*pre, "pre_tokenizer", at, spec, byte_level);
  at.expect(byte_level, "pre_tokenizer", "has no ByteLevel (byte-level BPE needs it, last)");
  const json* decoder = member(root, "decoder");
  if (decoder && !decoder->is_null()) {
    const json* t = decoder->is_object() ? member(*decoder, "type") : nullptr;
    at.expect(t && *t == "ByteLevel", "decoder",
              fmt::format("{} is not supported (only null or ByteLevel)",
                          t ? t->dump() : decoder->dump()));
  }
  // post_processor, truncation and padding only add specials, cut or pad: encode does none.

  read_added_tokens(root, at, spec);
  check_ids(spec, at, "model.vocab");
  return spec;
}

Spec read_spec(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto has = [&](const char* name) { return fs::exists(path / name, ec); };
    if (has("tokenizer.json"))
      return parse_tokenizer_json(read_file(path / "tokenizer.json"), path / "tokenizer.json");
    if (has("vocab.json")) return read_vocab_merges(path / "vocab.json", path / "merges.txt");
    if (has("encoder.json")) return read_vocab_merges(path / "encoder.json", path / "vocab.bpe");
    THROW_ERROR("{}: holds no tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe",
                path.string());
  }
  CHECK(fs::exists(path, ec), "{}: no such file or folder", path.string());
  return parse_tokenizer_json(read_file(path), path);
}

// Note [Canonical tokenizer.json]
// A tokenizer.json written from the Spec alone, so that the same vocabulary, merges,
// pre-tokenization, normalizer and added tokens give the same bytes from any source file:
// keys in Hugging Face's order, one vocabulary entry or merge per line, vocabulary by id,
// merges by rank with duplicates dropped, added tokens by id with only `special` kept from
// the source. ByteLevel's own regex is written as ByteLevel(use_regex) and an equivalent Split
// by GPT-2's pattern before a plain ByteLevel is written the same way. What encoding ignores is
// written fixed: no post-processor, a ByteLevel decoder, no unk token. Hugging Face numbers an
// added token outside model.vocab by its place (after the vocabulary, in order), not by its
// id: the same unless the ids leave gaps (cl100k's specials), where HF's ids for those differ.
std::string canonical_json(const Spec& spec) {
  std::string out;
  out.reserve(spec.vocab.size() * 24 + spec.merges.size() * 16 + 4096);
  out += "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\n\"added_tokens\":[";
  for (size_t i = 0; i < spec.added.size(); ++i) {
    const AddedToken& t = spec.added[i];
    out += fmt::format("{}\n{{\"id\":{},\"content\":", i ? "," : "", t.id);
    out += shown(t.content);
    out += fmt::format(
        ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
        "\"special\":{}}}",
        t.special);
  }
  out += "],\n\"normalizer\":";
  out += spec.nfc ? "{\"type\":\"NFC\"}" : "null";
  out += ",\n\"pre_tokenizer\":";
  std::vector<SplitStep> splits = spec.splits;
  bool use_regex = !splits.empty() && splits.back() == SplitStep{std::string(kGpt2Pattern), false};
  if (use_regex) splits.pop_back();
  std::string byte_level = fmt::format(
      "{{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
      "\"use_regex\":{}}}",
      use_regex);
  if (splits.empty()) {
    out += byte_level;
  } else {
    out += "{\"type\":\"Sequence\",\"pretokenizers\":[";
    for (const SplitStep& s : splits) {
      out +=
          fmt::format("{{\"type\":\"Split\",\"pattern\":{{\"{}\":", s.literal ? "String" : "Regex");
      out += shown(s.pattern);
      out += "},\"behavior\":\"Isolated\",\"invert\":false},";
    }
    out += byte_level + "]}";
  }
  out +=
      ",\n\"post_processor\":null,\n\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":"
      "false,\"trim_offsets\":false,\"use_regex\":false},\n\"model\":{\"type\":\"BPE\","
      "\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
      "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,";
  out += fmt::format("\"ignore_merges\":{},\n\"vocab\":{{", spec.ignore_merges);
  std::unordered_map<int32_t, std::string_view> tokens;
  tokens.reserve(spec.vocab.size());
  bool spaced = false;  // a token with a space: merges must be written as pairs
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    const auto& [id, token] = spec.vocab[i];
    out += i ? ",\n" : "\n";
    out += shown(token);
    out += fmt::format(":{}", id);
    tokens.emplace(id, token);
    spaced |= token.find(' ') != std::string::npos;
  }
  out += "},\n\"merges\":[";
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    std::string_view a = tokens.at(spec.merges[i].first), b = tokens.at(spec.merges[i].second);
    out += i ? ",\n" : "\n";
    out += spaced ? fmt::format("[{},{}]", shown(a), shown(b)) : shown(fmt::format("{} {}", a, b));
  }
  out += "]}}\n";
  return out;
}

}  // namespace trainer::data::bpe

namespace trainer::data {

std::string byte_tokenizer_json() {
  bpe::Spec spec;
  spec.from = "the byte tokenizer";
  for (int b = 0; b < 256; ++b) spec.vocab.emplace_back(b, bpe::byte_char(uint8_t(b)));
  spec.added.push_back({256, "<|endoftext|>", true});
  return bpe::canonical_json(spec);
}

}  // namespace trainer::data
