#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "runtime/dtype.h"

namespace trainer {

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(to_float(to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // (1 + 2^-7) + 2^-8 is halfway between an odd and an even mantissa: rounds up to even.
  float odd_tie = 1.0f + std::ldexp(1.0f, -7) + std::ldexp(1.0f, -8);
  EXPECT_EQ(to_float(to_bf16(odd_tie)), 1.0f + std::ldexp(1.0f, -6));
  // Just above the halfway point rounds up.
  EXPECT_EQ(to_float(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
}

TEST(Bf16, ExactValuesAndSpecials) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65536.0f}) EXPECT_EQ(to_float(to_bf16(v)), v);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest finite float rounds up to infinity, as IEEE rounding does.
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::max()))));
}

// fp16 in software against the compiler's _Float16 (IEEE conversions in hardware or libgcc),
// where the compiler has one: every half to float, and floats to half at a stride through all
// 2^32 bit patterns plus, around every pair of neighbouring halves, the midpoint (a tie) and
// the floats either side of it, where rounding decides. NaN must stay NaN (any payload).
#if defined(__FLT16_MAX__)
TEST(F16, MatchesTheCompilersHalfEverywhereRoundingDecides) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float want = float(std::bit_cast<_Float16>(uint16_t(h)));
    const float got = to_float(f16{uint16_t(h)});
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hex << h;
    }
  }
  auto check = [](uint32_t u) {
    const float f = std::bit_cast<float>(u);
    const uint16_t want = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    const uint16_t got = to_f16(f).bits;
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(to_float(f16{got}))) << std::hex << u;
    } else {
      ASSERT_EQ(got, want) << std::hex << "float bits " << u;
    }
  };
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) check(uint32_t(u));
  for (uint32_t h = 0; h < 0x7c00u; ++h)
    for (const uint32_t sign : {0u, 0x80000000u}) {
      const double lo = to_float(f16{uint16_t(h)}), hi = to_float(f16{uint16_t(h + 1)});
      const uint32_t mid = std::bit_cast<uint32_t>(float((lo + hi) / 2)) | sign;
      for (const uint32_t u : {mid - 1, mid, mid + 1}) check(u);
    }
  for (const float f : {65504.0f, 65519.99f, 65520.0f, 1e30f, 5.96e-8f, 2.98e-8f, 2.99e-8f})
    check(std::bit_cast<uint32_t>(f));
}
#endif

}  // namespace trainer
