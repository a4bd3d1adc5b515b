#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/rng.h"

namespace trainer {

TEST(Rng, PhiloxIsAPureFunctionOfKeyAndCounter) {
  auto a = philox4x32({1, 2, 3, 4}, 42);
  auto b = philox4x32({1, 2, 3, 4}, 42);
  auto c = philox4x32({1, 2, 3, 5}, 42);
  auto d = philox4x32({1, 2, 3, 4}, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
}

TEST(Rng, NormalHasTheRequestedMoments) {
  std::vector<float> x(200001);
  fill_normal(x.data(), int64_t(x.size()), 7, 1.0f, 2.0f);
  double mean = 0, sq = 0;
  for (float v : x) mean += v;
  mean /= double(x.size());
  for (float v : x) sq += (v - mean) * (v - mean);
  double std = std::sqrt(sq / double(x.size()));
  // Sampling error of 2e5 draws: 2 / sqrt(2e5) = 4.5e-3 for the mean, 3.2e-3 for the std (4 and
  // 6 sigma); a fixed seed, and rounding (1e-7) cannot move them.
  EXPECT_NEAR(mean, 1.0, 0.02);
  EXPECT_NEAR(std, 2.0, 0.02);
}

TEST(Rng, ElementDependsOnlyOnKeyAndIndex) {
  std::vector<float> big(1001), small(7);
  fill_normal(big.data(), 1001, 99, 0, 1);
  fill_normal(small.data(), 7, 99, 0, 1);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(big[i], small[i]);
}

TEST(Rng, StreamResumesFromItsState) {
  Rng a(5);
  for (int i = 0; i < 10; ++i) a.next_u64();
  Rng b(a.key(), a.offset());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  float u = Rng(3).uniform();
  EXPECT_GE(u, 0.0f);
  EXPECT_LT(u, 1.0f);
}

}  // namespace trainer
