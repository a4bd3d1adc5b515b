// The loader: batch contents per mode (targets, segments, lengths, loss tokens), epochs,
// resume at the same and at another world size, state serialisation, validation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "runtime/error.h"
#include "test_util.h"

namespace trainer::data {

namespace fs = std::filesystem;
namespace {

using testing::TempDir;
using testing::token_of;

// Decodes a synthetic token into (doc, pos).
std::pair<int, int> decode(int32_t t) {
  return {(t - 1) / 256, (t - 1) % 256};
}

LoaderConfig config(const fs::path& dir, Mode mode) {
  LoaderConfig c;
  c.data_dir = dir;
  c.mode = mode;
  c.batch_size = 4;
  c.seq_len = 16;
  c.max_tokens = 64;
  c.seed = 5;
  c.prefetch = 3;
  c.max_epochs = 1;
  return c;
}

TEST(Loader, StreamWindows) {
  TempDir dir("loader");
  auto lengths = testing::random_lengths(60, 2, 40, 1);
  testing::write_corpus(dir.path, lengths, 7);
  Loader l(config(dir.path, Mode::stream), 0, 1);
  int batches = 0;
  while (auto b = l.next()) {
    ++batches;
    ASSERT_EQ(b->B, 4);
    ASSERT_EQ(b->T, 16);
    EXPECT_TRUE(b->segments.empty());
    EXPECT_TRUE(b->lengths.empty());
    EXPECT_EQ(b->loss_tokens, 64);  // B x T: every window position has its next token
    for (int r = 0; r < 4; ++r)
      for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(b->targets[r * 16 + t], b->tokens[r * 16 + t + 1]);
  }
  uint64_t total = 0;
  for (auto n : lengths) total += n;
  EXPECT_EQ(batches, int((total - 1) / 16 / 4));
  EXPECT_FALSE(l.next());
}

TEST(Loader, PackSegmentsTargetsAndSplitDocuments) {
  TempDir dir("loader");
  std::vector<uint64_t> lengths = testing::random_lengths(80, 1, 12, 2);
  lengths[3] = 40;  // longer than T = 16: split over three rows
  lengths[50] = 17;
  testing::write_corpus(dir.path, lengths, 30);
  Loader l(config(dir.path, Mode::pack), 0, 1);
  std::map<int, int> seen_tokens;  // doc -> tokens seen
  int64_t real = 0, slots = 0;
  while (auto b = l.next()) {
    ASSERT_EQ(int(b->segments.size()), b->B * b->T);
    EXPECT_TRUE(b->lengths.empty());
    int64_t loss = 0;
    for (int r = 0; r < b->B; ++r) {
      int prev_seg = -1;
      for (int t = 0; t < b->T; ++t) {
        int i = r * b->T + t;
        int32_t seg = b->segments[i], tok = b->tokens[i], tgt = b->targets[i];
        slots++;
        if (seg < 0) {  // padding: only at the end of the row
          EXPECT_EQ(tok, 0);
          EXPECT_EQ(tgt, -1);
          prev_seg = 1 << 30;
          continue;
        }
        ASSERT_NE(prev_seg, 1 << 30) << "token after padding";
        ASSERT_TRUE(seg == prev_seg || seg == prev_seg + 1) << "segment ids must count up";
        if (seg != prev_seg && t > 0) {
          EXPECT_EQ(b->targets[i - 1], -1);  // no cross-doc target
        }
        prev_seg = seg;
        real++;
        auto [doc, pos] = decode(tok);
        seen_tokens[doc]++;
        bool last = uint64_t(pos) + 1 == lengths[size_t(doc)];
        if (last) {
          EXPECT_EQ(tgt, -1);
        } else {
          // Within the document: the next token, even at the row end (the document continues).
          EXPECT_EQ(tgt, token_of(uint64_t(doc), uint64_t(pos) + 1)) << doc << ":" << pos;
        }
        loss += tgt != -1;
      }
    }
    EXPECT_EQ(b->loss_tokens, loss);
  }
  for (size_t d = 0; d < lengths.size(); ++d)
    EXPECT_EQ(seen_tokens[int(d)], int(lengths[d])) << "document " << d;
  // First fit closes a batch when its 4 rows are full or 4 pieces wait, each longer than every
  // row's room: with pieces of 1-12 tokens that leaves a few of 16 free a row (one document a
  // row would fill 6.5 / 16 = 41%). A function of the lengths and the seed alone: the same on
  // every CPU.
  EXPECT_GT(double(real) / double(slots), 0.8);
}

TEST(Loader, BucketPaddingNeverCounted) {
  TempDir dir("loader");
  std::vector<uint64_t> lengths = testing::random_lengths(120, 1, 30, 3);
  testing::write_corpus(dir.path, lengths, 40);
  Loader l(config(dir.path, Mode::bucket), 0, 1);
  std::map<int, int> seen_tokens;
  while (auto b = l.next()) {
    ASSERT_EQ(int(b->lengths.size()), b->B);
    EXPECT_TRUE(b->segments.empty());
    EXPECT_LE(b->B * b->T, 64);                // max_tokens: rows are max_tokens / T
    EXPECT_TRUE(b->T % 8 == 0 || b->T == 16);  // the longest piece rounded up to 8, at most 16
    int64_t loss = 0;
    for (int r = 0; r < b->B; ++r) {
      int len = b->lengths[r];
      ASSERT_GE(len, 1);     // empty documents make no piece
      ASSERT_LE(len, b->T);  // the batch's T is its longest piece's length, rounded up
      for (int t = 0; t < b->T; ++t) {
        int i = r * b->T + t;
        if (t >= len) {
          EXPECT_EQ(b->tokens[i], 0);
          EXPECT_EQ(b->targets[i], -1);
          continue;
        }
        auto [doc, pos] = decode(b->tokens[i]);
        seen_tokens[doc]++;
        bool last = uint64_t(pos) + 1 == lengths[size_t(doc)];
        EXPECT_EQ(b->targets[i], last ? -1 : token_of(uint64_t(doc), uint64_t(pos) + 1));
        loss += b->targets[i] != -1;
      }
    }
    EXPECT_EQ(b->loss_tokens, loss);
  }
  for (size_t d = 0; d < lengths.size(); ++d) EXPECT_EQ(seen_tokens[int(d)], int(lengths[d]));
}

// The global sequence of batches (rank order within each step) of `steps` steps.
std::vector<std::vector<int32_t>> run_steps(const LoaderConfig& c, int world, int steps,
                                            std::optional<LoaderState> from,
                                            LoaderState* after = nullptr) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<Loader>(c, r, world, from));
  std::vector<std::vector<int32_t>> seq;
  bool done = false;
  for (int s = 0; s < steps && !done; ++s)
    for (int r = 0; r < world; ++r) {
      auto b = ranks[size_t(r)]->next();
      if (!b) {
        done = true;
        break;
      }
      seq.push_back(b->tokens);
    }
  if (after) {
    *after = ranks[0]->state();
    for (auto& r : ranks) EXPECT_EQ(r->state(), *after);
  }
  return seq;
}

// Instruction data: a token that does not count (a prompt's) is never a target, in every mode;
// every other target is the document's next token, as without a mask.
TEST(Loader, UncountedTokensAreNeverTargets) {
  TempDir dir("loader");
  auto counted = [](uint64_t, uint64_t pos) { return pos % 3 != 0; };
  testing::write_corpus(dir.path, testing::random_lengths(60, 2, 40, 3), 7, testing::kVocab,
                        counted);
  for (Mode mode : {Mode::stream, Mode::pack, Mode::bucket}) {
    Loader l(config(dir.path, mode), 0, 1);
    int64_t masked = 0, batches = 0;
    while (auto b = l.next()) {
      ++batches;
      int64_t targets = 0;
      for (size_t i = 0; i < b->tokens.size(); ++i) {
        if (b->targets[i] == -1) {
          const bool padding = (!b->segments.empty() && b->segments[i] == -1) ||
                               (!b->lengths.empty() && int(i % b->T) >= b->lengths[i / b->T]);
          if (!padding && decode(b->tokens[i]).second % 3 == 2) ++masked;
          continue;
        }
        ++targets;
        auto [doc, pos] = decode(b->tokens[i]);
        auto [tdoc, tpos] = decode(b->targets[i]);
        if (mode != Mode::stream) EXPECT_EQ(std::pair(tdoc, tpos), std::pair(doc, pos + 1));
        EXPECT_NE(tpos % 3, 0) << "an uncounted token is a target, mode " << int(mode);
      }
      EXPECT_EQ(b->loss_tokens, targets);
    }
    EXPECT_GT(batches, 0);
    EXPECT_GT(masked, 0) << "no position lost its target to the mask, mode " << int(mode);
  }
}

// Every world size walks one sequence of global batches through the epochs: a step that an
// epoch cannot fill takes the next epoch's first batches (so W ranks make the optimizer steps
// of one rank accumulating W micro-batches), and a resume, inside such a step too, continues it
// at any world size. The last epoch's last step goes short.
TEST(Loader, ResumeAtSameAndOtherWorldSize) {
  TempDir dir("loader");
  testing::write_corpus(dir.path, testing::random_lengths(150, 1, 30, 4), 40);
  for (Mode mode : {Mode::stream, Mode::pack, Mode::bucket}) {
    SCOPED_TRACE(kModeNames.name(mode));
    LoaderConfig c = config(dir.path, mode);
    c.max_epochs = 3;
    // Three whole epochs on one rank, within the 1000 steps asked for: an epoch is at most 300
    // pieces (16 tokens at most, 2 a document of <= 30), 4 or more a batch but a window's last
    // (4 rows; bucket: 64 / T >= 4), or 281 windows of 16 in 4s: under 80 batches an epoch.
    auto ref = run_steps(c, 1, 1000, std::nullopt);
    LoaderState st;
    auto head = run_steps(c, 2, 5, std::nullopt, &st);  // 10 global batches at world size 2
    ASSERT_EQ(head.size(), 10u);
    for (size_t i = 0; i < head.size(); ++i) ASSERT_EQ(head[i], ref[i]);
    EXPECT_EQ(st.cursor, 10);
    for (int W : {2, 3, 1}) {
      auto tail = run_steps(c, W, 4, st);
      ASSERT_EQ(tail.size(), size_t(4 * W));
      for (size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], ref[10 + i]) << "W=" << W;
    }
    int64_t first_epoch = 0;
    {
      Loader l(c, 0, 1);
      while (l.next() && l.state().epoch == 0) ++first_epoch;
    }
    for (int world = 2; world <= 5; ++world) {
      SCOPED_TRACE(world);
      auto seq = run_steps(c, world, 1000, std::nullopt);
      ASSERT_EQ(seq.size(), ref.size());
      for (size_t i = 0; i < seq.size(); ++i) ASSERT_EQ(seq[i], ref[i]) << "global batch " << i;
    }
    // W ranks to the first step that crosses the first epoch's end, then 3 ranks on.
    int W = 2;
    while (first_epoch % W == 0) ++W;  // a world size that does not divide the epoch
    const int steps = int(first_epoch / W + 1);
    LoaderState crossed;
    run_steps(c, W, steps, std::nullopt, &crossed);
    EXPECT_EQ(crossed.epoch, 1);
    EXPECT_EQ(crossed.cursor, W * steps - first_epoch);
    auto after = run_steps(c, 3, 4, crossed);
    ASSERT_EQ(after.size(), 12u);
    for (size_t i = 0; i < after.size(); ++i) ASSERT_EQ(after[i], ref[size_t(W * steps) + i]);
    // Resuming at the very end of the run yields nothing.
    LoaderState end;
    run_steps(c, 1, 1000000, std::nullopt, &end);  // to the end: under 3 x 80 steps, as above
    EXPECT_EQ(end.epoch, 2);
    Loader done(c, 0, 1, LoaderState{c.seed, 3, 0});
    EXPECT_FALSE(done.next());
  }
}

TEST(Loader, EpochsReshuffleAndEnd) {
  TempDir dir("loader");
  testing::write_corpus(dir.path, testing::random_lengths(100, 1, 30, 6), 40);
  LoaderConfig c = config(dir.path, Mode::pack);
  c.max_epochs = 2;
  Loader l(c, 0, 1);
  std::vector<std::vector<int32_t>> e0, e1;
  while (auto b = l.next()) (l.state().epoch == 0 ? e0 : e1).push_back(b->tokens);
  ASSERT_FALSE(e0.empty());
  ASSERT_FALSE(e1.empty());
  EXPECT_NE(e0, e1);
  EXPECT_FALSE(l.next());
}

TEST(Loader, StateJsonRoundTrip) {
  LoaderState s{123456789012345ull, 4, 77};
  nlohmann::json j = s;
  EXPECT_EQ(j.at("cursor").get<int64_t>(), 77);
  EXPECT_EQ(j.get<LoaderState>(), s);
  EXPECT_THROW(nlohmann::json::parse(R"({"seed":1})").get<LoaderState>(), Error);
}

TEST(Loader, ValidatesTokenizerAndConfig) {
  TempDir dir("loader");
  testing::write_corpus(dir.path, testing::random_lengths(20, 1, 30, 6), 40);
  LoaderConfig c = config(dir.path, Mode::stream);
  c.tokenizer_hash = 99;
  EXPECT_THROW(Loader(c, 0, 1), Error);
  c.tokenizer_hash = testing::kHash;
  c.vocab_size = 32000;
  EXPECT_THROW(Loader(c, 0, 1), Error);
  c.vocab_size = testing::kVocab;
  EXPECT_THROW(Loader(c, 2, 2), UsageError);
  c.split = "val";  // empty split
  EXPECT_THROW(Loader(c, 0, 1), Error);
  c.split = "train";
  c.batch_size = 1000;  // drop_last leaves no whole step: <= 600 tokens against 16000 a batch
  Loader l(c, 0, 1);
  EXPECT_THROW(l.next(), Error);
}

}  // namespace
}  // namespace trainer::data
