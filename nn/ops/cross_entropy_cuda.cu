// CUDA cross-entropy over the vocabulary: a block per row finds the max and the log-sum-exp
// offset (kept for backward) and the row's loss in double; one thread then adds the rows' losses
// in order (deterministic). Backward recomputes the probabilities from the statistics and
// writes the gradient in place of the logits.
#include "nn/ops/cross_entropy.h"
#include "nn/ops/cuda_common.cuh"
#include "runtime/workspace.h"

namespace trainer::nn::cuda {

namespace {

constexpr int kBlock = 256;

// Reduces v over the block (sum or max) through shared memory; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < blockDim.x / 32 ? shared[lane] : (kMax ? -INFINITY : 0.0f);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) shared[0] = w;
  }
  __syncthreads();
  const float out = shared[0];
  __syncthreads();
  return out;
}

template <typename T>
__global__ void forward_kernel(double* row_loss, float* stats, const T* logits,
                               const int32_t* targets, int64_t V) {
  __shared__ float shared[32];
  const int64_t n = blockIdx.x;
  const int32_t t = targets[n];
  if (t < 0) {  // not counted: no statistics needed
    if (threadIdx.x == 0) row_loss[n] = 0.0;
    return;
  }
  const T* x = logits + n * V;
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, ld(x[v]));
  m = block_reduce<true>(m, shared);
  float s = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += expf(ld(x[v]) - m);
  s = block_reduce<false>(s, shared);
  if (threadIdx.x == 0) {
    const float offset = logf(s);
    stats[2 * n] = m;
    stats[2 * n + 1] = offset;
    row_loss[n] = (double(m) - double(ld(x[t]))) + double(offset);
  }
}

__global__ void sum_rows_kernel(double* loss_sum, const double* row_loss, int64_t N) {
  double s = 0;
  for (int64_t n = 0; n < N; ++n) s += row_loss[n];
  *loss_sum += s;
}

template <typename T>
__global__ void backward_kernel(T* dlogits, const T* logits, const float* stats,
                                const int32_t* targets, float scale, int64_t V) {
  const int64_t n = blockIdx.x;
  const int32_t t = targets[n];
  T* d = dlogits + n * V;
  const T* x = logits + n * V;
  if (t < 0) {
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) st(d[v], 0.0f);
    return;
  }
  const float m = stats[2 * n], offset = stats[2 * n + 1];
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float p = expf(ld(x[v]) - m - offset);
    st(d[v], scale * (p - (v == t ? 1.0f : 0.0f)));
  }
}

}  // namespace

void cross_entropy_forward(const Context& ctx, const Tensor& loss_sum, const Tensor& stats,
                           const Tensor& logits, const Tensor& targets) {
  const int64_t N = logits.rows(), V = logits.cols();
  TRAINER_ASSERT(logits.contiguous() && targets.numel() == N && stats.numel() == 2 * N &&
                     loss_sum.dtype == DType::f64 && targets.dtype == DType::i32,
                 "cross_entropy_forward shapes");
  Workspace::Scope scratch(ctx.workspace);
  double* row_loss = scratch.take<double>(N);
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<<<unsigned(N), kBlock, 0, stream_of(ctx)>>>(
        row_loss, ptr<float>(stats), ptr<T>(logits), ptr<int32_t>(targets), V);
  });
  sum_rows_kernel<<<1, 1, 0, stream_of(ctx)>>>(ptr<double>(loss_sum), row_loss, N);
  check_launch("cross_entropy_forward");
}

void cross_entropy_backward(const Context& ctx, const Tensor& dlogits, const Tensor& logits,
                            const Tensor& stats, const Tensor& targets, float scale) {
  const int64_t N = logits.rows(), V = logits.cols();
  TRAINER_ASSERT(dlogits.numel() == N * V && dlogits.dtype == logits.dtype &&
                     targets.numel() == N && stats.numel() == 2 * N,
                 "cross_entropy_backward shapes");
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<<<unsigned(N), kBlock, 0, stream_of(ctx)>>>(
        ptr<T>(dlogits), ptr<T>(logits), ptr<float>(stats), ptr<int32_t>(targets), scale, V);
  });
  check_launch("cross_entropy_backward");
}

size_t cross_entropy_workspace(int64_t N) {
  return Workspace::bytes_for<double>(N);
}

}  // namespace trainer::nn::cuda
