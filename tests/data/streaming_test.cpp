// Bounded resident memory: a loader walking a corpus far larger than the bound, in random
// order, keeps its resident set within the bound stated in docs/data.md.
#include <gtest/gtest.h>

#include <fstream>

#include "data/loader.h"
#include "test_util.h"

namespace trainer::data {
namespace {

// Resident set size in bytes (from /proc/self/statm).
uint64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * 4096;
}

TEST(Streaming, ResidentMemoryStaysBounded) {
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

  const uint64_t bound = uint64_t(32) << 20;
  for (Mode mode : {Mode::stream, Mode::pack}) {
    uint64_t base = rss_bytes();
    LoaderConfig c;
    c.data_dir = dir.path;
    c.mode = mode;
    c.batch_size = 16;
    c.seq_len = 1024;
    c.prefetch = 4;
    c.max_epochs = 1;
    c.verify = Verify::all;  // the open-time scan must not stay resident either
    Loader loader(c, 0, 1);
    uint64_t peak = rss_bytes(), tokens = 0;
    int batches = 0;
    while (auto b = loader.next()) {
      tokens += uint64_t(b->B) * uint64_t(b->T);
      if (++batches % 64 == 0) peak = std::max(peak, rss_bytes());
    }
    peak = std::max(peak, rss_bytes());
    EXPECT_GE(tokens * 2, corpus_bytes * 9 / 10) << mode_name(mode);  // read it all
    EXPECT_LT(peak - std::min(peak, base), bound)
        << mode_name(mode) << ": resident grew by " << (peak - base) / (1 << 20) << " MiB";
    std::printf("%s: %.0f MiB corpus, resident growth %.1f MiB\n", mode_name(mode),
                double(corpus_bytes) / (1 << 20), double(peak - std::min(peak, base)) / (1 << 20));
  }
}

}  // namespace
}  // namespace trainer::data
