// Half-precision conversion in integer and fp32 arithmetic, exact on every compiler and CPU
// (clang before 15 has no _Float16 on x86-64 without AVX512-FP16, which the fuzzers' build
// needs): IEEE binary16, round to nearest with ties to even, infinities and NaN kept.
#include "runtime/dtype.h"

namespace trainer {

f16 to_f16(float f) {
  const uint32_t u = bits_as<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  constexpr uint32_t kInf32 = 0x7f800000u;
  constexpr uint32_t kOverflow = 0x47800000u;  // 2^16: at and above it, every value is inf
  constexpr uint32_t kNormal = 0x38800000u;    // 2^-14, the smallest normal half
  if (a >= kOverflow) return f16{uint16_t(sign | (a > kInf32 ? 0x7e00u : 0x7c00u))};
  if (a < kNormal) {
    // Subnormal or zero: adding 0.5 puts the half's last place (2^-24) at the float's, so the
    // float addition rounds exactly as the half must (ties to even), and the low bits are it.
    const float shifted = bits_as<float>(a) + 0.5f;
    return f16{uint16_t(sign | (bits_as<uint32_t>(shifted) - 0x3f000000u))};
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a
  // carry into the exponent is the right result (up to inf for values from 65520).
  const uint32_t odd = (a >> 13) & 1u;
  a += (uint32_t(15 - 127) << 23) + 0xfffu + odd;
  return f16{uint16_t(sign | (a >> 13))};
}

float to_float(f16 h) {
  const uint32_t magnitude = uint32_t(h.bits & 0x7fffu) << 13;
  const uint32_t exponent = magnitude & (0x7c00u << 13);
  uint32_t u = magnitude + (uint32_t(127 - 15) << 23);
  if (exponent == (0x7c00u << 13)) {
    u += uint32_t(128 - 16) << 23;  // inf and NaN: the float's top exponent
  } else if (exponent == 0) {
    // Zero or subnormal: scaled as a normal of exponent 1, less that exponent's implicit 1.
    u += 1u << 23;
    u = bits_as<uint32_t>(bits_as<float>(u) - bits_as<float>(113u << 23));
  }
  return bits_as<float>(u | uint32_t(h.bits & 0x8000u) << 16);
}

}  // namespace trainer
