// CUDA sum of squares: 256 fixed chunks (as the CPU kernel), each reduced by one block in a
// fixed tree, then summed in order by one thread: the same bits on every run.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"
#include "runtime/workspace.h"

namespace trainer::nn::cuda {

namespace {

constexpr int kChunks = 256, kBlock = 256;

template <typename G>
__global__ void chunk_kernel(double* partial, const G* x, int64_t n) {
  __shared__ double shared[kBlock];
  const int64_t c = blockIdx.x, begin = n * c / kChunks, end = n * (c + 1) / kChunks;
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kBlock) {
    const double g = ld(x[i]);
    s += g * g;
  }
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[c] = shared[0];
}

__global__ void total_kernel(double* out, const double* partial) {
  double s = 0;
  for (int c = 0; c < kChunks; ++c) s += partial[c];
  *out = s;
}

}  // namespace

void sum_squares(const Context& ctx, const Tensor& out, const ConstTensor& x) {
  Workspace::Scope scratch(ctx.workspace);
  double* partial = scratch.take<double>(kChunks);
  with_float(x.dtype, [&](auto tag) {
    using G = decltype(tag);
    chunk_kernel<<<kChunks, kBlock, 0, stream_of(ctx)>>>(partial, ptr<G>(x), x.numel());
  });
  total_kernel<<<1, 1, 0, stream_of(ctx)>>>(ptr<double>(out), partial);
  check_launch("sum_squares");
}

size_t sum_squares_workspace(const Context&) {
  return Workspace::bytes_for<double>(kChunks);
}

}  // namespace trainer::nn::cuda
