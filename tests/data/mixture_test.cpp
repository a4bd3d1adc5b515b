// Mixtures (Note [Mixtures] in data/mixture.cpp): the rule keeps every source within one batch
// of its due share under any weights and phase changes; the loader deals a mixture's batches
// alike at every world size and resumes it; bounded sources leave and end the data.
#include "data/mixture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "test_util.h"

namespace trainer::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

TEST(Mixture, EverySourceStaysWithinOneBatchOfItsDueShare) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> weight(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 2 + trial % 5;
    std::vector<double> due(n, 0.0);
    std::vector<int64_t> count(n, 0);
    std::vector<double> w(n);
    for (int batch = 0; batch < 600; ++batch) {
      if (batch % 150 == 0) {  // a new phase, some sources left out of it
        double sum = 0;
        for (double& x : w) sum += (x = weight(rng) < 0.2 ? 0.0 : weight(rng));
        if (sum == 0) sum = w[0] = 1;
        for (double& x : w) x /= sum;
      }
      std::vector<double> next = due;
      std::vector<bool> active(n);
      for (size_t s = 0; s < n; ++s) next[s] += w[s], active[s] = w[s] > 0;
      const int s = pick_source(next, count, active);
      ASSERT_GE(s, 0);
      ASSERT_GT(w[size_t(s)], 0) << "an inactive source gave a batch";
      due = next;
      ++count[size_t(s)];
      for (size_t i = 0; i < n; ++i)
        ASSERT_LT(std::abs(double(count[i]) - due[i]), 1.0)
            << "trial " << trial << " batch " << batch << " source " << i;
    }
  }
  EXPECT_EQ(pick_source({1, 1}, {0, 0}, {false, false}), -1);
  EXPECT_EQ(pick_source({0.5, 0.5}, {0, 0}, {true, true}), 0);  // the first on a tie
}

LoaderConfig mixed(const TempDir& dir, std::vector<MixtureSource> sources) {
  LoaderConfig c;
  c.mode = Mode::pack;
  c.batch_size = 2;
  c.seq_len = 16;
  c.seed = 9;
  c.prefetch = 2;
  for (MixtureSource& s : sources) s.data_dir = dir.path / s.data_dir;
  c.mixture.sources = std::move(sources);
  c.mixture.phases = {{3, {0.0, 1.0, 1.0}}};
  c.mixture.batches_per_step = 4;
  return c;
}

// All of a world's batches in global order: round by round, rank by rank.
std::vector<std::vector<int32_t>> global_order(const LoaderConfig& c, int world, int rounds,
                                               std::optional<LoaderState> from = std::nullopt,
                                               LoaderState* end = nullptr) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<Loader>(c, r, world, from));
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < rounds; ++i)
    for (auto& l : ranks)
      if (auto b = l->next()) out.push_back(b->tokens);
  if (end) *end = ranks[0]->state();
  return out;
}

TEST(Mixture, TheLoaderDealsItAlikeAtEveryWorldSizeAndResumesIt) {
  TempDir dir("mixture");
  for (int s = 0; s < 3; ++s) {
    fs::create_directories(dir.path / std::to_string(s));
    testing::write_corpus(dir.path / std::to_string(s), testing::random_lengths(40, 3, 30, s));
  }
  const LoaderConfig c = mixed(dir, {{"0", 0.5, 0}, {"1", 0.3, 0}, {"2", 0.2, 0}});
  LoaderState at12, at48;
  global_order(c, 1, 12, std::nullopt, &at12);
  const auto one = global_order(c, 1, 48, std::nullopt, &at48);
  EXPECT_EQ(global_order(c, 4, 12), one);
  LoaderState half;
  const auto first = global_order(c, 2, 12, std::nullopt, &half);
  ASSERT_TRUE(half.mixture.has_value());
  EXPECT_EQ(half.mixture->batches, 24);
  // Resumed from 24 batches (step 6 at 4 a step) on 3 ranks: the rest of the same sequence.
  LoaderConfig later = c;
  later.mixture.first_step = 6;
  const nlohmann::json saved = half;
  const auto rest = global_order(later, 3, 8, saved.get<LoaderState>());
  std::vector<std::vector<int32_t>> joined = first;
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(joined, one);
  // Source 0 is out of the mixture from step 3 (batch 12): it gave nothing after.
  EXPECT_GT(at12.mixture->count[0], 0);
  EXPECT_EQ(at48.mixture->count[0], at12.mixture->count[0]);
}

TEST(Mixture, BoundedSourcesLeaveItAndEndTheData) {
  TempDir dir("mixture_bounded");
  for (const char* s : {"a", "b"}) fs::create_directories(dir.path / s);
  testing::write_corpus(dir.path / "a", std::vector<uint64_t>(8, 15));   // 8 rows: 4 batches
  testing::write_corpus(dir.path / "b", std::vector<uint64_t>(16, 15));  // 8 batches
  LoaderConfig c = mixed(dir, {{"a", 1, 2}, {"b", 1, 1}});
  c.mixture.phases.clear();
  LoaderState end;
  const auto all = global_order(c, 2, 100, std::nullopt, &end);
  EXPECT_EQ(all.size(), 16u);  // a's two epochs and b's one
  EXPECT_EQ(end.mixture->count, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(end.mixture->epoch, (std::vector<int64_t>{1, 0}));  // (each found its end after)
}

}  // namespace
}  // namespace trainer::data
