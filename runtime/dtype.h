// Element types: the one vocabulary runtime, nn and dist use for buffers, tensors, files and
// collectives. bf16 is the top half of an IEEE fp32; conversion from fp32 rounds to nearest,
// ties to even, and keeps NaN a (quiet) NaN.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace trainer {

enum class DType : uint8_t { f32, bf16, f64, i32, i64, u8, f16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

// The safetensors spelling of a dtype ("F32", "BF16", "F64", "I32", "I64", "U8", "F16").
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f64:
      return "F64";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::f16:
      return "F16";
  }
  return "?";
}

// The config spelling of a floating-point dtype ("fp32", "bf16").
constexpr std::string_view float_dtype_name(DType t) {
  return t == DType::bf16 ? "bf16" : t == DType::f32 ? "fp32" : dtype_name(t);
}

struct bf16 {
  uint16_t bits;
};

// std::bit_cast, for translation units nvcc compiles as C++17.
template <typename To, typename From>
inline To bits_as(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

inline bf16 to_bf16(float f) {
  uint32_t u = bits_as<uint32_t>(f);
  // NaN stays NaN (quiet); otherwise round to nearest, ties to even. Written as one select so
  // that loops over it vectorise.
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return bf16{uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}

inline float to_float(bf16 h) {
  return bits_as<float>(uint32_t(h.bits) << 16);
}

// IEEE half precision (F16), a storage format of Hugging Face weights only: nothing computes
// in it. Conversion from fp32 rounds to nearest, ties to even; both directions keep infinities
// and NaN (runtime/dtype.cpp).
struct f16 {
  uint16_t bits;
};
f16 to_f16(float f);
float to_float(f16 h);

// Uniform element access for kernels templated on float or bf16 storage.
inline float load(float x) {
  return x;
}
inline float load(bf16 x) {
  return to_float(x);
}
inline void store(float& dst, float v) {
  dst = v;
}
inline void store(bf16& dst, float v) {
  dst = to_bf16(v);
}

// The DType of a C++ element type.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, bf16>)
    return DType::bf16;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::i64;
  else
    static_assert(std::is_same_v<T, uint8_t>, "no DType for this type");
  return DType::u8;
}

}  // namespace trainer
