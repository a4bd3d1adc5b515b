// Bounded memory: a loader walking a corpus far larger than its buffers, in random order, owns
// no more memory than those buffers (docs/data.md, "Resident memory bound").
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "data/loader.h"
#include "test_util.h"

namespace trainer::data {
namespace {

// Anonymous resident memory in bytes (RssAnon in /proc/self/status): the pages of the
// process's own allocations and stacks. The file pages of its mappings are left out: which
// cached pages the kernel maps around a fault (fault-around, readahead, large folios) is its
// policy, not the loader's, and differs between kernels and file systems.
uint64_t anon_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t kib = 0;
  while (in >> key) {
    if (key == "RssAnon:") {
      in >> kib;
      return kib << 10;
    }
    in.ignore(1 << 10, '\n');
  }
  ADD_FAILURE() << "no RssAnon in /proc/self/status";
  return 0;
}

TEST(Streaming, OwnedMemoryStaysWithinTheLoadersBuffers) {
  testing::TempDir dir("rss");
  // 8 shards of 16M two-byte tokens: a 256 MiB corpus, written shard by shard.
  constexpr int kShards = 8;
  constexpr uint64_t kDocs = 4096, kDocLen = 4096;
  Manifest m;
  m.tokenizer_hash = testing::kHash;
  m.vocab_size = testing::kVocab;
  m.input_format = "synthetic";
  SplitInfo& info = m.splits["train"];
  std::vector<int32_t> doc(kDocLen);
  for (int s = 0; s < kShards; ++s) {
    ShardWriter w(testing::kVocab, testing::kHash);
    for (uint64_t d = 0; d < kDocs; ++d) {
      for (uint64_t i = 0; i < kDocLen; ++i) doc[i] = int32_t((d * 31 + i + uint64_t(s)) % 65000);
      doc[0] = int32_t(kDocLen % 100);  // vary nothing else: length is what matters
      w.add_document(doc);
    }
    std::string file = "train-" + std::to_string(s) + ".bin";
    info.shards.push_back({file, w.num_docs(), w.num_tokens(), w.file_bytes()});
    info.documents += w.num_docs();
    info.tokens += w.num_tokens();
    w.write(dir.path / file);
  }
  write_manifest(dir.path, m);
  uint64_t corpus_bytes = 0;
  for (const auto& e : info.shards) corpus_bytes += e.bytes;
  ASSERT_GT(corpus_bytes, uint64_t(250) << 20);

  constexpr int kB = 16, kT = 1024, kPrefetch = 4;
  // What the loader owns (docs/data.md): the document index, 8 B a document, up to 24 B while
  // its vector grows (the old buffer and the new); and prefetch + 2 batches (the queue, the one
  // being built, the one handed out) of three int32 arrays of B x T. The bound is twice that,
  // for freed blocks the allocator keeps for reuse instead of returning (at most what it once
  // held), and 4 MiB for the prefetch thread's stack and its arena's bookkeeping: 7.8 MiB here.
  // A loader that kept what it read would hold the 256 MiB corpus.
  const uint64_t index = 24 * kShards * kDocs;
  const uint64_t batches = (kPrefetch + 2) * 3 * sizeof(int32_t) * uint64_t(kB) * kT;
  const uint64_t bound = 2 * (index + batches) + (uint64_t(4) << 20);
  for (Mode mode : {Mode::stream, Mode::pack}) {
    uint64_t base = anon_resident_bytes();
    LoaderConfig c;
    c.data_dir = dir.path;
    c.mode = mode;
    c.batch_size = kB;
    c.seq_len = kT;
    c.prefetch = kPrefetch;
    c.max_epochs = 1;
    c.verify = Verify::all;  // the open-time scan must not keep what it read either
    Loader loader(c, 0, 1);
    uint64_t peak = anon_resident_bytes(), tokens = 0;
    int batches_read = 0;
    while (auto b = loader.next()) {
      tokens += uint64_t(b->B) * uint64_t(b->T);
      if (++batches_read % 16 == 0) peak = std::max(peak, anon_resident_bytes());
    }
    peak = std::max(peak, anon_resident_bytes());
    EXPECT_GE(tokens * 2, corpus_bytes * 9 / 10) << kModeNames.name(mode);  // read it all
    const uint64_t growth = peak - std::min(peak, base);
    EXPECT_LT(growth, bound) << kModeNames.name(mode);
    std::printf("%s: %.0f MiB corpus, owned memory grew %.1f MiB (bound %.1f MiB)\n",
                kModeNames.name(mode), double(corpus_bytes) / (1 << 20), double(growth) / (1 << 20),
                double(bound) / (1 << 20));
  }
}

}  // namespace
}  // namespace trainer::data
