// The profile's nesting: a scope's own time excludes the scopes opened inside it, so own times
// add up to the time profiled with every moment counted once.
#include "runtime/profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

namespace trainer::profile {
namespace {

std::map<std::string, Entry> by_name() {
  std::map<std::string, Entry> m;
  for (const Entry& e : report()) m[e.name] = e;
  return m;
}

void busy(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST(Profile, NestedScopesCountOnce) {
  set_enabled(true);
  reset();
  Timer wall;
  {
    PROFILE_SCOPE("outer", "gemm");
    busy(2);
    {
      PROFILE_SCOPE("inner", "activations");
      busy(3);
      { PROFILE_SCOPE("innermost", "norms"); }
    }
    { PROFILE_SCOPE("inner", "activations"); }
  }
  const double wall_ms = wall.ms();
  set_enabled(false);
  auto e = by_name();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e["outer"].calls, 1);
  EXPECT_EQ(e["inner"].calls, 2);
  EXPECT_EQ(e["inner"].family, "activations");
  // Own plus nested is the total, scope by scope (sums of the same clock readings: the bound
  // is double rounding of millisecond values, far under a nanosecond).
  EXPECT_NEAR(e["outer"].ms + e["inner"].total_ms, e["outer"].total_ms, 1e-9);
  EXPECT_NEAR(e["inner"].ms + e["innermost"].total_ms, e["inner"].total_ms, 1e-9);
  // Every own time is non-negative, and together they are the outer scope's time, within the
  // wall time around it: nothing counted twice.
  double own = 0;
  for (const auto& [name, entry] : e) {
    EXPECT_GE(entry.ms, 0) << name;
    own += entry.ms;
  }
  EXPECT_NEAR(own, e["outer"].total_ms, 1e-9);
  // The outer scope's readings lie inside the wall timer's (one steady clock): the gap is at
  // least the bookkeeping between them, tens of ns, against the sum's rounding of ~1e-15 ms.
  EXPECT_LE(own, wall_ms);
  // The sleeps are lower bounds of the times that hold them (a clock never runs short).
  EXPECT_GE(e["inner"].total_ms, 3.0);
  EXPECT_GE(e["outer"].total_ms, 5.0);
  reset();
}

// Note [Profile work]: work goes to the innermost open scope only, a product's FLOPs are
// 2 m n k a call, and work outside every scope is not attributed.
TEST(Profile, WorkCountsToTheInnermostScope) {
  set_enabled(true);
  reset();
  const GemmShape shape{4, 5, 6, false, true, DType::bf16, DType::f32};
  add_bytes(100);  // outside every scope
  {
    PROFILE_SCOPE("outer", "gemm");
    add_product(shape);
    {
      PROFILE_SCOPE("inner", "norms");
      add_bytes(64);
      add_bytes(32);
    }
    add_product(shape);
  }
  set_enabled(false);
  auto e = by_name();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e["outer"].products.size(), 1u);
  EXPECT_EQ(e["outer"].products.at(shape), 2);
  EXPECT_EQ(e["outer"].flops(), 2 * 2.0 * 4 * 5 * 6);
  EXPECT_EQ(e["outer"].bytes, 0);
  EXPECT_EQ(e["inner"].bytes, 96);
  EXPECT_TRUE(e["inner"].products.empty());
  reset();
}

TEST(Profile, OffCostsNothingAndRecordsNothing) {
  set_enabled(false);
  reset();
  { PROFILE_SCOPE("never", "other"); }
  EXPECT_TRUE(report().empty());
}

}  // namespace
}  // namespace trainer::profile
