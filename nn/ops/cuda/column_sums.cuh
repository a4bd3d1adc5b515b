// Deterministic column sums over the rows of an (N, C) matrix on the GPU: the reduction behind
// the norms' weight gradients and the linear layer's bias gradient. A thread per column walking
// all N rows (the first cut) left the GPU nearly idle: C threads, N dependent loads each. Here
// the rows are split into kColumnSumParts fixed parts; a block sums one part of 32 columns
// (kColumnSumLanes rows in flight per column, combined in a fixed order) into a partial, and a
// second pass adds each column's partials in part order to the output. The parts depend on N
// only, so a run gives the same bits every time. Only included from .cu files.
#pragma once

#include "nn/ops/cuda/common.cuh"
#include "runtime/workspace.h"

namespace trainer::nn::cuda {

constexpr int kColumnSumParts = 64;  // row parts, each one block per 32 columns
constexpr int kColumnSumLanes = 8;   // rows in flight per column within a block

// K output pointers, passed to a kernel by value.
template <typename G, int K>
struct ColumnOutputs {
  G* p[K];
};

// Scratch column_sums takes for K sums over C columns.
inline size_t column_sums_workspace(int K, int64_t C) {
  return Workspace::bytes_for<float>(int64_t(kColumnSumParts) * K * C);
}

// partial[p][k][c] = sum over the rows n of part p of term(n, c)[k], where term(n, c, acc) adds
// its K values into acc.
template <int K, typename Term>
__global__ void column_partials_kernel(float* partial, Term term, int64_t N, int64_t C) {
  __shared__ float lanes[K][kColumnSumLanes][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t p = blockIdx.y, begin = N * p / kColumnSumParts,
                end = N * (p + 1) / kColumnSumParts;
  float acc[K] = {};
  if (c < C)
    for (int64_t n = begin + threadIdx.y; n < end; n += kColumnSumLanes) term(n, c, acc);
  for (int k = 0; k < K; ++k) lanes[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int k = 0; k < K; ++k) {
    float s = 0;
    for (int l = 0; l < kColumnSumLanes; ++l) s += lanes[k][l][threadIdx.x];
    partial[(p * K + k) * C + c] = s;
  }
}

// out[k][c] += sum over p of partial[p][k][c], in part order.
template <int K, typename G>
__global__ void column_finish_kernel(ColumnOutputs<G, K> out, const float* partial, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    float s = ld(out.p[k][c]);
    for (int p = 0; p < kColumnSumParts; ++p) s += partial[(int64_t(p) * K + k) * C + c];
    st(out.p[k][c], s);
  }
}

// out[k][c] += sum over n of term(n, c)[k], for K outputs of C columns, deterministically, with
// column_sums_workspace(K, C) bytes of ctx's workspace.
template <int K, typename G, typename Term>
void column_sums(const Context& ctx, ColumnOutputs<G, K> out, Term term, int64_t N, int64_t C) {
  Workspace::Scope scratch(ctx.workspace);
  float* partial = scratch.take<float>(int64_t(kColumnSumParts) * K * C);
  const dim3 grid(blocks_for(C, 32), kColumnSumParts), block(32, kColumnSumLanes);
  column_partials_kernel<K><<<grid, block, 0, stream_of(ctx)>>>(partial, term, N, C);
  column_finish_kernel<K><<<blocks_for(C, 128), 128, 0, stream_of(ctx)>>>(out, partial, C);
}

}  // namespace trainer::nn::cuda
