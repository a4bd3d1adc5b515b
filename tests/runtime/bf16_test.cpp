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

}  // namespace trainer
