// Byte-level BPE: the merges applied by rank to each piece of pre-tokenized text
// (bpe_pretokenizer.cpp), with a per-thread cache of pieces; the files are read in
// bpe_files.cpp.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>

#include "data/bpe_internal.h"
#include "runtime/error.h"

namespace trainer::data {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

// The merges as an open-addressing table: (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = kNoRank;
    int32_t id = -1;
  };
  void build(const std::vector<std::pair<int32_t, int32_t>>& merges,
             const std::vector<int32_t>& results) {
    int bits = 4;
    while ((size_t(1) << bits) < merges.size() * 2) ++bits;
    shift_ = 64 - bits;
    mask_ = (uint64_t(1) << bits) - 1;
    slots_.assign(size_t(1) << bits, Slot{});
    for (size_t r = 0; r < merges.size(); ++r) {
      uint64_t key = pack(merges[r].first, merges[r].second);
      uint64_t i = index(key);
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = {key, uint32_t(r), results[r]};
    }
  }
  // The slot of the pair; its rank is kNoRank when there is no such merge.
  const Slot& find(int32_t a, int32_t b) const {
    uint64_t key = pack(a, b);
    for (uint64_t i = index(key);; i = (i + 1) & mask_)
      if (slots_[i].key == key || slots_[i].key == kEmpty) return slots_[i];
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  uint64_t index(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  int shift_ = 60;
};

// A hash of a short byte string (a piece), for the cache.
uint64_t piece_hash(std::string_view s) {
  uint64_t h = 0x243F6A8885A308D3ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t c;
    std::memcpy(&c, s.data() + i, 8);
    h = std::rotl((h ^ c) * 0x9E3779B97F4A7C15ull, 29);
  }
  if (i < s.size()) {
    uint64_t c = 0;
    std::memcpy(&c, s.data() + i, s.size() - i);
    h = std::rotl((h ^ c) * 0x9E3779B97F4A7C15ull, 29);
  }
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  return h ^ (h >> 32);
}

// Per thread and tokenizer: the ids of recently seen pieces (a direct-mapped table of
// 2^16 slots, one cache line each) and the merge loop's scratch space.
struct Cache {
  static constexpr size_t kMaxKey = 22, kMaxIds = 8, kBits = 16;
  struct Slot {
    uint64_t hash = 0;
    uint8_t len = 0, n = 0;  // n == 0: empty
    char key[kMaxKey];
    int32_t ids[kMaxIds];
  };
  std::vector<Slot> slots = std::vector<Slot>(size_t(1) << kBits);
  std::vector<int32_t> ids;  // the merge loop's symbols
  std::vector<uint32_t> ranks;
  std::vector<int32_t> merged;
  std::string normalized;  // NFC output
};

// The caches of this thread, most recently used first; a tokenizer is known by its serial
// number (never reused), so a cache outliving its tokenizer is never consulted again.
Cache& thread_cache(uint64_t serial) {
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<Cache>>> caches;
  for (size_t i = 0; i < caches.size(); ++i)
    if (caches[i].first == serial) {
      if (i) std::swap(caches[i], caches[0]);
      return *caches[0].second;
    }
  if (caches.size() == 4) caches.pop_back();
  caches.insert(caches.begin(), {serial, std::make_unique<Cache>()});
  return *caches[0].second;
}

std::atomic<uint64_t> next_serial{1};

}  // namespace

struct BpeTokenizer::Impl {
  fs::path from;
  std::string canonical;
  uint64_t hash = 0;
  uint64_t serial = next_serial.fetch_add(1);
  int vocab_size = 0, eos = -1, bos = -1;
  bool ignore_merges = false;
  std::vector<std::string> bytes;  // by id: what decode writes
  std::vector<bool> known;         // by id: a token has this id
  int32_t byte_id[256] = {};
  MergeTable merges;
  std::unordered_map<std::string_view, int32_t> whole;  // ignore_merges: token bytes -> id
  bpe::PreTokenizer pre;
  std::vector<bpe::AddedToken> found;  // the added tokens that are not special, longest first
  std::vector<std::pair<std::string, int32_t>> specials;  // the special ones, by id
  bool starts_found[256] = {};                            // the bytes they start with

  // The next added token that is not special in text at or after `pos`, leftmost and then
  // longest: {position, token}, or {npos, nullptr}.
  std::pair<size_t, const bpe::AddedToken*> find_added(std::string_view text, size_t pos) const;

  explicit Impl(const bpe::Spec& spec);
  void encode_piece(std::string_view piece, Cache& cache, std::vector<int32_t>& out) const;
  void merge(std::string_view piece, Cache& cache, std::vector<int32_t>& out) const;
  void merge_long(std::string_view piece, std::vector<int32_t>& out) const;
};

BpeTokenizer::Impl::Impl(const bpe::Spec& spec) : from(spec.from), pre(spec) {
  canonical = bpe::canonical_json(spec);
  hash = 0xCBF29CE484222325ull;
  for (char c : canonical) hash = (hash ^ uint8_t(c)) * 0x100000001B3ull;
  ignore_merges = spec.ignore_merges;
  int32_t max_id = -1;
  for (const auto& [id, token] : spec.vocab) max_id = std::max(max_id, id);
  for (const bpe::AddedToken& t : spec.added) max_id = std::max(max_id, t.id);
  vocab_size = max_id + 1;
  bytes.resize(size_t(vocab_size));
  known.assign(size_t(vocab_size), false);
  std::unordered_map<std::string_view, int32_t> ids;
  std::vector<bool> byte_level(size_t(vocab_size), false);
  for (const auto& [id, token] : spec.vocab) {
    byte_level[size_t(id)] = bpe::byte_level_bytes(token, bytes[size_t(id)]);
    if (!byte_level[size_t(id)]) bytes[size_t(id)] = token;
    known[size_t(id)] = true;
    ids.emplace(token, id);
  }
  for (const bpe::AddedToken& t : spec.added) {
    if (!bpe::byte_level_bytes(t.content, bytes[size_t(t.id)])) bytes[size_t(t.id)] = t.content;
    known[size_t(t.id)] = true;
  }
  for (int b = 0; b < 256; ++b) byte_id[b] = ids.at(bpe::byte_char(uint8_t(b)));
  std::vector<int32_t> results(spec.merges.size());
  std::vector<std::string_view> texts(bytes.size());
  for (const auto& [id, token] : spec.vocab) texts[size_t(id)] = token;
  std::string joined;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    auto [a, b] = spec.merges[r];
    joined.assign(texts[size_t(a)]).append(texts[size_t(b)]);
    results[r] = ids.at(joined);
  }
  merges.build(spec.merges, results);
  if (ignore_merges)  // only a token made of byte characters can be a piece
    for (const auto& [id, token] : spec.vocab)
      if (byte_level[size_t(id)]) whole.emplace(bytes[size_t(id)], id);

  for (const bpe::AddedToken& t : spec.added) {
    if (!t.special) found.push_back(t), starts_found[uint8_t(t.content[0])] = true;
    if (t.special) specials.emplace_back(t.content, t.id);
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.content.size() > b.content.size();
  });

  auto find = [&](std::string_view name) {
    for (const bpe::AddedToken& t : spec.added)
      if (t.content == name) return t.id;
    auto it = ids.find(name);
    return it == ids.end() ? -1 : it->second;
  };
  for (std::string_view name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (eos < 0) eos = find(name);
  for (std::string_view name : {"<|begin_of_text|>", "<s>"})
    if (bos < 0) bos = find(name);
  if (bos < 0) bos = eos;
}

// Added tokens that are not special (GPT-NeoX's runs of spaces) are found in the text first, as
// Hugging Face does, and the text between them is pre-tokenized; special ones are never found.
std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  Cache& cache = thread_cache(m.serial);
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 16);
  auto piece = [&](std::string_view piece) { m.encode_piece(piece, cache, out); };
  size_t pos = 0;
  for (;;) {
    auto [at, added] = m.find_added(text, pos);
    m.pre.cut(text.substr(pos, at == std::string_view::npos ? at : at - pos), cache.normalized,
              piece);
    if (!added) return out;
    out.push_back(added->id);
    pos = at + added->content.size();
  }
}

std::pair<size_t, const bpe::AddedToken*> BpeTokenizer::Impl::find_added(std::string_view text,
                                                                         size_t pos) const {
  if (!found.empty())
    for (; pos < text.size(); ++pos) {
      if (!starts_found[uint8_t(text[pos])]) continue;
      std::string_view rest = text.substr(pos);
      for (const bpe::AddedToken& t : found)  // the second byte first: most fail there
        if (t.content.size() <= rest.size() && (t.content.size() == 1 || t.content[1] == rest[1]) &&
            rest.starts_with(t.content))
          return {pos, &t};
    }
  return {std::string_view::npos, nullptr};
}

void BpeTokenizer::Impl::encode_piece(std::string_view piece, Cache& cache,
                                      std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[uint8_t(piece[0])]);
    return;
  }
  if (piece.size() > Cache::kMaxKey) {
    merge(piece, cache, out);
    return;
  }
  uint64_t h = piece_hash(piece);
  Cache::Slot& slot = cache.slots[h & ((size_t(1) << Cache::kBits) - 1)];
  if (slot.n && slot.hash == h && slot.len == piece.size() &&
      std::memcmp(slot.key, piece.data(), piece.size()) == 0) {
    out.insert(out.end(), slot.ids, slot.ids + slot.n);
    return;
  }
  size_t first = out.size();
  merge(piece, cache, out);
  size_t n = out.size() - first;
  if (n <= Cache::kMaxIds) {
    slot.hash = h;
    slot.len = uint8_t(piece.size());
    slot.n = uint8_t(n);
    std::memcpy(slot.key, piece.data(), piece.size());
    std::copy(out.begin() + ptrdiff_t(first), out.end(), slot.ids);
  }
}

// BPE on one piece: while some adjacent pair of symbols has a merge, merge the pair of lowest
// rank (the leftmost of equals). Short pieces scan the pairs' ranks; long ones use a heap.
void BpeTokenizer::Impl::merge(std::string_view piece, Cache& cache,
                               std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = whole.find(piece);
    if (it != whole.end()) {
      out.push_back(it->second);
      return;
    }
  }
  size_t n = piece.size();
  if (n > 128) {
    merge_long(piece, out);
    return;
  }
  std::vector<int32_t>& ids = cache.ids;
  std::vector<uint32_t>& ranks = cache.ranks;  // ranks[i]: the merge of symbols i and i + 1
  std::vector<int32_t>& merged = cache.merged;
  ids.resize(n);
  ranks.resize(n);
  merged.resize(n);
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id[uint8_t(piece[i])];
  auto rank = [&](size_t i) {
    const MergeTable::Slot& s = merges.find(ids[i], ids[i + 1]);
    ranks[i] = s.rank;
    merged[i] = s.id;
  };
  for (size_t i = 0; i + 1 < n; ++i) rank(i);
  ranks[n - 1] = kNoRank;
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoRank) break;
    ids[best] = merged[best];
    std::copy(ids.begin() + ptrdiff_t(best) + 2, ids.begin() + ptrdiff_t(n),
              ids.begin() + ptrdiff_t(best) + 1);
    std::copy(ranks.begin() + ptrdiff_t(best) + 2, ranks.begin() + ptrdiff_t(n),
              ranks.begin() + ptrdiff_t(best) + 1);
    std::copy(merged.begin() + ptrdiff_t(best) + 2, merged.begin() + ptrdiff_t(n),
              merged.begin() + ptrdiff_t(best) + 1);
    --n;
    if (best > 0) rank(best - 1);
    if (best + 1 < n)
      rank(best);
    else
      ranks[best] = kNoRank;
  }
  out.insert(out.end(), ids.begin(), ids.begin() + ptrdiff_t(n));
}

void BpeTokenizer::Impl::merge_long(std::string_view piece, std::vector<int32_t>& out) const {
  size_t n = piece.size();
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1: none
  };
  std::vector<Symbol> sym(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {byte_id[uint8_t(piece[i])], int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1};
  using Entry = std::pair<uint32_t, int32_t>;  // (rank, left symbol's position): lowest first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || sym[size_t(i)].next < 0) return;
    uint32_t r = merges.find(sym[size_t(i)].id, sym[size_t(sym[size_t(i)].next)].id).rank;
    if (r != kNoRank) heap.emplace(r, i);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    auto [r, i] = heap.top();
    heap.pop();
    Symbol& s = sym[size_t(i)];
    if (s.id < 0 || s.next < 0) continue;  // merged away, or now last
    Symbol& next = sym[size_t(s.next)];
    const MergeTable::Slot& m = merges.find(s.id, next.id);
    if (m.rank != r) continue;  // the pair changed since
    s.id = m.id;
    next.id = -1;
    s.next = next.next;
    if (s.next >= 0) sym[size_t(s.next)].prev = i;
    push(s.prev);
    push(i);
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

BpeTokenizer::BpeTokenizer(const fs::path& path)
    : impl_(std::make_unique<Impl>(bpe::read_spec(path))) {}

BpeTokenizer::BpeTokenizer(std::string_view tokenizer_json, const fs::path& from)
    : impl_(std::make_unique<Impl>(bpe::parse_tokenizer_json(tokenizer_json, from))) {}

BpeTokenizer::~BpeTokenizer() = default;

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::string out;
  out.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    CHECK(id >= 0 && id < m.vocab_size && m.known[size_t(id)],
          "{}: token id {} is not in the vocabulary (size {})", m.from.string(), id, m.vocab_size);
    out += m.bytes[size_t(id)];
  }
  return out;
}

int BpeTokenizer::vocab_size() const {
  return impl_->vocab_size;
}
std::vector<std::pair<std::string, int32_t>> BpeTokenizer::special_tokens() const {
  return impl_->specials;
}
int BpeTokenizer::eos_id() const {
  return impl_->eos;
}
int BpeTokenizer::bos_id() const {
  return impl_->bos;
}
const std::string& BpeTokenizer::canonical_json() const {
  return impl_->canonical;
}
uint64_t BpeTokenizer::hash() const {
  return impl_->hash;
}

}  // namespace trainer::data
