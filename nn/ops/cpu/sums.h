// Sums the CPU kernels share, so that a fused kernel and the ops it replaces give the same bits.
#pragma once

#include <cstdint>

#include "nn/ops/cpu/dtype.h"

namespace trainer::nn::cpu {

// out[i] = a[i] + b[i] for i < n, in fp32: the residual add, shared by residual_forward and the
// norms that fuse it (their sums are then the same bits).
template <typename B>
inline void residual_add(float* out, const float* a, const B* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + load(b[i]);
}

// The norms' weight gradients sum their N rows in norm_parts(N) fixed parts (Note
// [Thread-invariant norm gradients] in cpu/layernorm.cpp).
constexpr int64_t kNormParts = 64;
inline int64_t norm_parts(int64_t N) {
  return N < kNormParts ? (N > 0 ? N : 1) : kNormParts;
}

// g[c] += the sum of `parts` rows of C partial sums, `stride` apart from parts[0], in row order,
// for c < C: a norm's weight gradient from its fixed parts. Each g[c] is (g[c] + row 0) + row 1
// + ..., as a walk down each column would sum it, but the rows are walked one after another
// into row 0 (which this overwrites), contiguous and vectorised.
template <typename G>
inline void add_parts(G* g, float* parts, int64_t rows, int64_t stride, int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) parts[c] = load(g[c]) + parts[c];
  for (int64_t p = 1; p < rows; ++p) {
    const float* row = parts + p * stride;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) parts[c] += row[c];
  }
  for (int64_t c = 0; c < C; ++c) store(g[c], parts[c]);
}

}  // namespace trainer::nn::cpu
