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

// Runs row(n, acc) for every row n < N, the rows cut into norm_parts(N) fixed parts run in
// parallel over `threads`: each part walks its rows in order, `acc` its `width` fp32 partial
// sums at partial + p * width, zeroed first. Returns the number of parts, which add_parts then
// adds in order, so the bits depend on N alone (Note [Thread-invariant norm gradients] in
// cpu/layernorm.cpp).
template <typename Row>
inline int64_t for_each_row_part(int64_t N, int64_t width, float* partial, int threads, Row&& row) {
  const int64_t parts = norm_parts(N);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t p = 0; p < parts; ++p) {
    float* acc = partial + p * width;
    for (int64_t c = 0; c < width; ++c) acc[c] = 0.0f;
    for (int64_t n = N * p / parts; n < N * (p + 1) / parts; ++n) row(n, acc);
  }
  return parts;
}

// g[c] += the sum of `parts` rows of C partial sums, `stride` apart from parts[0], in row order,
// for c < C: a norm's weight gradient from its fixed parts. Each g[c] is (g[c] + row 0) + row 1
// + ..., as a walk down each column would sum it, but the rows are walked one after another
// into row 0 (which this overwrites), contiguous and vectorised, each of `threads` threads
// taking blocks of columns (which leaves every column's order as it is).
template <typename G>
inline void add_parts(G* g, float* parts, int64_t rows, int64_t stride, int64_t C, int threads) {
  constexpr int64_t kBlock = 256;  // columns: a 1 KiB stretch of each row
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < C; b += kBlock) {
    const int64_t e = b + kBlock < C ? b + kBlock : C;
#pragma omp simd
    for (int64_t c = b; c < e; ++c) parts[c] = load(g[c]) + parts[c];
    for (int64_t p = 1; p < rows; ++p) {
      const float* row = parts + p * stride;
#pragma omp simd
      for (int64_t c = b; c < e; ++c) parts[c] += row[c];
    }
    for (int64_t c = b; c < e; ++c) store(g[c], parts[c]);
  }
}

}  // namespace trainer::nn::cpu
