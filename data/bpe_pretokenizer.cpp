// The BPE tokenizer's text side: GPT-2's byte alphabet, UTF-8 validity, NFC (ICU) and the
// Split steps' regular expressions (PCRE2, JIT-compiled, Unicode properties).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <array>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "data/bpe_internal.h"
#include "runtime/error.h"

namespace trainer::data::bpe {

namespace {

// The code point of byte b's character: printable Latin-1 bytes stand for themselves; the
// others (controls, space, DEL, NBSP, soft hyphen) take the code points from 256 up, in order.
uint32_t byte_code_point(uint8_t byte) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t[size_t(b)] = printable ? uint32_t(b) : next++;
    }
    return t;
  }();
  return table[byte];
}

}  // namespace

std::string byte_char(uint8_t byte) {
  uint32_t c = byte_code_point(byte);  // below U+0800: one or two bytes of UTF-8
  if (c < 0x80) return std::string(1, char(c));
  return {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
}

bool byte_level_bytes(std::string_view text, std::string& out) {
  static const std::unordered_map<uint32_t, uint8_t> byte_of = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    for (int b = 0; b < 256; ++b) m.emplace(byte_code_point(uint8_t(b)), uint8_t(b));
    return m;
  }();
  out.clear();
  for (size_t i = 0; i < text.size();) {
    uint8_t c = uint8_t(text[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0x80) {  // a byte's character is below U+0800: two bytes of UTF-8
      if (c < 0xC0 || c >= 0xE0 || i + 1 == text.size()) return false;
      cp = (uint32_t(c & 0x1F) << 6) | (uint8_t(text[i + 1]) & 0x3F);
      len = 2;
    }
    auto it = byte_of.find(cp);
    if (it == byte_of.end()) return false;
    out += char(it->second);
    i += len;
  }
  return true;
}

namespace {

// PCRE2's per-thread matching state: match data for the whole match only, and a JIT stack
// that may grow to 8 MiB.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchState() {
    TRAINER_ASSERT(data && context && stack, "PCRE2 is out of memory");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// A pattern as PCRE2 is to read it: `\s` and `\S` become White_Space and its complement.
// PCRE2's \s also matches U+180E (Mongolian vowel separator), which the Rust regex of tiktoken
// and the Oniguruma of Hugging Face do not.
std::string pcre2_pattern(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[++i];
    if (c == 's') {
      out += "\\p{White_Space}";
    } else if (c == 'S') {
      out += "\\P{White_Space}";
    } else if (c == 'Q') {  // \Q...\E quotes: copied as they are
      size_t end = pattern.find("\\E", i);
      end = end == std::string_view::npos ? pattern.size() : end + 2;
      out.append("\\").append(pattern.substr(i, end - i));
      i = end - 1;
    } else {
      out.append({'\\', c});
    }
  }
  return out;
}

// The length of the longest valid UTF-8 prefix of [p, p + n): no overlong forms, surrogates
// or code points above U+10FFFF.
size_t valid_utf8_prefix(const uint8_t* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {  // eight ASCII bytes at a time
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (c < 0xC2 || c > 0xF4 || i + len > n) return i;
    uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c == 0xE0) lo = 0xA0;      // else overlong
    if (c == 0xED) hi = 0x9F;      // else a surrogate
    if (c == 0xF0) lo = 0x90;      // else overlong
    if (c == 0xF4) hi = 0x8F;      // else above U+10FFFF
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

}  // namespace

class PreTokenizer::Pattern {
 public:
  Pattern(const SplitStep& step, const std::filesystem::path& from) {
    std::string pattern = step.literal ? step.pattern : pcre2_pattern(step.pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    uint32_t options = PCRE2_UTF | (step.literal ? PCRE2_LITERAL : PCRE2_UCP);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                          &error, &offset, nullptr);
    CHECK(code_, "{}: pre_tokenizer: the pattern {} does not compile at offset {}: {}",
          from.string(), step.pattern, offset, pcre2_message(error));
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;  // else interpreted
  }
  ~Pattern() { pcre2_code_free(code_); }
  Pattern(Pattern&& o) noexcept : code_(std::exchange(o.code_, nullptr)), jit_(o.jit_) {}
  Pattern(const Pattern&) = delete;

  // The first match in s (valid UTF-8) at or after `start`: {begin, end}, or begin == npos.
  std::pair<size_t, size_t> find(std::string_view s, size_t start) const {
    thread_local MatchState m;
    auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    int rc = PCRE2_ERROR_JIT_STACKLIMIT;
    if (jit_) rc = pcre2_jit_match(code_, subject, s.size(), start, 0, m.data, m.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // no JIT, or its stack ran out: interpret
      rc = pcre2_match(code_, subject, s.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, m.data,
                       m.context);
    if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, 0};
    CHECK(rc >= 0, "pre-tokenization failed on {} bytes of text: {}", s.size(), pcre2_message(rc));
    const PCRE2_SIZE* v = pcre2_get_ovector_pointer(m.data);
    return {v[0], v[1]};
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

PreTokenizer::PreTokenizer(const Spec& spec) : nfc_(spec.nfc) {
  for (const SplitStep& s : spec.splits) patterns_.emplace_back(s, spec.from);
}

PreTokenizer::~PreTokenizer() = default;

// Note [Invalid UTF-8]
// Pre-tokenization needs characters, so text is cut at every byte that does not belong to a
// valid UTF-8 character (a stray continuation byte, a bad lead byte, an overlong form, a
// surrogate, a code point above U+10FFFF, a truncated character). Each such byte is a piece of
// its own, encoded as its byte's token; each maximal run of valid UTF-8 between them is
// normalized and pre-tokenized as if it were the whole text. Every byte lands in exactly one
// piece, so decode(encode(s)) == s (NFC(s) under an NFC normalizer).
void PreTokenizer::cut(std::string_view text, std::string& scratch,
                       const std::function<void(std::string_view)>& piece) const {
  auto p = reinterpret_cast<const uint8_t*>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t valid = valid_utf8_prefix(p + pos, text.size() - pos);
    std::string_view run = text.substr(pos, valid);
    pos += valid;
    if (nfc_ && valid) {
      CHECK(valid < size_t(std::numeric_limits<int32_t>::max()),
            "{} bytes of text are too many to normalize at once", valid);
      UErrorCode status = U_ZERO_ERROR;
      const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
      CHECK(U_SUCCESS(status), "ICU's NFC normalizer is unavailable: {}", u_errorName(status));
      icu::StringPiece utf8(run.data(), int32_t(run.size()));
      if (!nfc->isNormalizedUTF8(utf8, status)) {
        scratch.clear();
        icu::StringByteSink<std::string> sink(&scratch);
        status = U_ZERO_ERROR;
        nfc->normalizeUTF8(0, utf8, sink, nullptr, status);
        CHECK(U_SUCCESS(status), "NFC normalization failed: {}", u_errorName(status));
        run = scratch;
      }
    }
    if (valid) split(0, run, piece);
    if (pos < text.size()) piece(text.substr(pos++, 1));
  }
}

// Cuts s by patterns_[step] into its matches and the gaps between them (an empty match cuts
// nothing), and each of those by the later steps; the last step's pieces go to `piece`.
void PreTokenizer::split(size_t step, std::string_view s,
                         const std::function<void(std::string_view)>& piece) const {
  if (step == patterns_.size()) {
    piece(s);
    return;
  }
  size_t pos = 0, gap = 0;
  while (pos < s.size()) {
    auto [begin, end] = patterns_[step].find(s, pos);
    if (begin == std::string_view::npos) break;
    if (begin == end) {  // an empty match: look again one character on
      pos = begin + 1;
      while (pos < s.size() && (uint8_t(s[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > gap) split(step + 1, s.substr(gap, begin - gap), piece);
    split(step + 1, s.substr(begin, end - begin), piece);
    pos = gap = end;
  }
  if (gap < s.size()) split(step + 1, s.substr(gap), piece);
}

}  // namespace trainer::data::bpe
