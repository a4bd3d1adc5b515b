// Runtime dtype -> template dispatch for the CPU kernels: with_float(t, f) calls f(float{}) or
// f(bf16{}), so a kernel body is written once over `using T = decltype(tag)` and load/store.
#pragma once

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace trainer::nn::cpu {

template <typename F>
void with_float(DType t, F&& f) {
  if (t == DType::f32) return f(float{});
  TRAINER_ASSERT(t == DType::bf16, "a floating-point tensor of dtype {}", dtype_name(t));
  f(bf16{});
}

// The same for a pair of dtypes (input, output), all four combinations.
template <typename F>
void with_floats(DType a, DType b, F&& f) {
  with_float(a, [&](auto ta) { with_float(b, [&](auto tb) { f(ta, tb); }); });
}

}  // namespace trainer::nn::cpu
