// Element types and bf16 conversion. bf16 is the top half of an IEEE fp32; conversion from
// fp32 rounds to nearest, ties to even, and keeps NaN a (quiet) NaN.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainer {

enum class DType : uint8_t { f32, bf16, i32, u16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::i32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::u16:
      return 2;
  }
  return 0;
}

// The safetensors spelling of a dtype ("F32", "BF16", "I32", "U16").
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::i32:
      return "I32";
    case DType::bf16:
      return "BF16";
    case DType::u16:
      return "U16";
  }
  return "?";
}

struct bf16 {
  uint16_t bits;
};

inline bf16 to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{uint16_t(u >> 16)};
}

inline float to_float(bf16 h) {
  return std::bit_cast<float>(uint32_t(h.bits) << 16);
}

}  // namespace trainer
