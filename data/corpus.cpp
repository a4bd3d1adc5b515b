// Corpus: opening a split's shards and reading the concatenated token stream.
#include "data/corpus.h"

#include <algorithm>

#include "runtime/error.h"

namespace trainer::data {

namespace fs = std::filesystem;

DocIndex doc_index_from_lengths(const std::vector<uint64_t>& lengths) {
  DocIndex idx;
  idx.starts.reserve(lengths.size() + 1);
  for (uint64_t n : lengths) idx.starts.push_back(idx.starts.back() + n);
  return idx;
}

Corpus::Corpus(const fs::path& dir, const std::string& split, const ShardExpect& expect,
               Verify verify, bool index_docs)
    : dir_(dir), split_(split), manifest_(read_manifest(dir)) {
  fs::path mpath = dir / kManifestName;
  auto it = manifest_.splits.find(split);
  // What the corpus is, against what the run asks of it: the user's to change (exit 2).
  USAGE_CHECK(it != manifest_.splits.end(), "{}: no split '{}'", mpath.string(), split);
  const SplitInfo& info = it->second;
  USAGE_CHECK(expect.vocab_size == 0 || manifest_.vocab_size <= expect.vocab_size,
              "{}: corpus vocab size {} exceeds the model's {} (model.vocab_size)", mpath.string(),
              manifest_.vocab_size, expect.vocab_size);
  USAGE_CHECK(expect.tokenizer_hash == 0 || manifest_.tokenizer_hash == expect.tokenizer_hash,
              "{}: corpus was made with another tokenizer (hash {:016x}, expected {:016x})",
              mpath.string(), manifest_.tokenizer_hash, expect.tokenizer_hash);
  ShardExpect want{manifest_.vocab_size, manifest_.tokenizer_hash};
  for (const ShardEntry& e : info.shards) {
    auto shard = std::make_unique<Shard>(dir / e.file, want, verify);
    const ShardHeader& h = shard->header();
    CHECK(h.num_docs == e.documents && h.num_tokens == e.tokens,
          "{}: shard holds {} documents / {} tokens, the manifest says {} / {}",
          shard->path().string(), h.num_docs, h.num_tokens, e.documents, e.tokens);
    CHECK(h.has_loss_mask() == manifest_.loss_mask, "{}: shard {} a loss mask, the manifest {}",
          shard->path().string(), h.has_loss_mask() ? "has" : "lacks",
          manifest_.loss_mask ? "promises one" : "does not");
    if (index_docs) {
      uint64_t base = shard_starts_.back();
      for (uint64_t d = 1; d <= h.num_docs; ++d)
        docs_.starts.push_back(base + shard->doc_offset(d));
      shard->release_all();
    }
    shard_starts_.push_back(shard_starts_.back() + h.num_tokens);
    shards_.push_back(std::move(shard));
  }
  if (!index_docs) docs_.starts = {0, num_tokens()};  // one pseudo document: the stream
  CHECK(num_tokens() > 0, "{}: split '{}' is empty (no tokens)", mpath.string(), split);
}

Corpus::~Corpus() = default;

template <typename F>
void Corpus::for_each_part(uint64_t pos, uint64_t count, F read) const {
  CHECK(pos + count <= num_tokens(), "{}: read of tokens [{}, {}) past the end of split '{}' ({})",
        dir_.string(), pos, pos + count, split_, num_tokens());
  uint64_t done = 0;
  while (done < count) {
    size_t s = size_t(std::upper_bound(shard_starts_.begin(), shard_starts_.end(), pos) -
                      shard_starts_.begin() - 1);
    uint64_t n = std::min(count - done, shard_starts_[s + 1] - pos);
    read(*shards_[s], pos - shard_starts_[s], n, done);
    pos += n;
    done += n;
  }
}

void Corpus::read(uint64_t pos, uint64_t count, int32_t* out) const {
  for_each_part(pos, count, [&](const Shard& s, uint64_t begin, uint64_t n, uint64_t at) {
    s.read_tokens(begin, n, out + at);
  });
}

void Corpus::read_counted(uint64_t pos, uint64_t count, uint8_t* out) const {
  for_each_part(pos, count, [&](const Shard& s, uint64_t begin, uint64_t n, uint64_t at) {
    s.read_counted(begin, n, out + at);
  });
}

}  // namespace trainer::data
