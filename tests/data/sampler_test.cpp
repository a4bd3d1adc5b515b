// The keyed permutation: a bijection for every size, reproducible, different per key.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "data/sampler.h"

namespace trainer::data {
namespace {

TEST(Permutation, IsBijection) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 1000ull, 4097ull, 65536ull}) {
    Permutation p(n, 99);
    std::vector<int> seen(n, 0);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t v = p(i);
      ASSERT_LT(v, n);
      seen[v]++;
    }
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(Permutation, KeyedAndReproducible) {
  Permutation a(10000, epoch_key(1, 0, 1)), b(10000, epoch_key(1, 0, 1));
  Permutation c(10000, epoch_key(1, 1, 1)), d(10000, epoch_key(2, 0, 1));
  int same_ab = 0, same_ac = 0, same_ad = 0, fixed = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    same_ab += a(i) == b(i);
    same_ac += a(i) == c(i);
    same_ad += a(i) == d(i);
    fixed += a(i) == i;
  }
  EXPECT_EQ(same_ab, 10000);
  // Another key gives an unrelated permutation: ~1 coincidence (or fixed point) in 10000 is
  // expected, a Poisson count of mean 1, so 50 is never reached by chance. Integer arithmetic:
  // the same counts on every CPU.
  EXPECT_LT(same_ac, 50);
  EXPECT_LT(same_ad, 50);
  EXPECT_LT(fixed, 50);
}

// Five billion windows with no storage: the permutation is a few words (a table of the
// domain would be 40 GB), and on a sample of it the outputs stay in range, distinct and
// reproducible.
TEST(Permutation, AHugeDomainNeedsNoStorage) {
  // n_, key_, half_bits_ (padded to 8 bytes) and half_mask_: four words, no table.
  static_assert(sizeof(Permutation) <= 32, "a permutation holds no table");
  const uint64_t n = uint64_t(5) << 30;
  const Permutation p(n, 7), again(n, 7);
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < 100000; ++i) {
    const uint64_t at = i * 53653 + (i >> 3);  // spread over the whole domain
    const uint64_t v = p(at);
    ASSERT_LT(v, n);
    ASSERT_EQ(v, again(at));
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 100000u);
}

}  // namespace
}  // namespace trainer::data
