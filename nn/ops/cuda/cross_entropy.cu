// CUDA cross-entropy over the vocabulary (or a slice of it: Note [Vocabulary-parallel loss]): a
// block per row finds the max and the log-sum-exp offset (kept for backward) in one pass; a
// thread per row merges slices' statistics or takes its target's loss in double; one block then
// adds the rows' losses in a fixed order (deterministic). Backward recomputes the probabilities
// from the statistics and writes the gradient in place of the logits.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"
#include "runtime/workspace.h"

namespace trainer::nn::cuda {

namespace {

constexpr int kBlock = 256;

// Folds (m2, s2) into (m, s): running maxima and sums of exp(x - max) of two sets of values.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both sets empty
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

// (max, sum of exp(x - max)) over the block's (m, s) pairs; every thread gets the result.
__device__ void block_combine(float& m, float& s, float2* shared) {
  for (int o = 16; o > 0; o >>= 1)
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = {m, s};
  __syncthreads();
  if (warp == 0) {
    float2 w = lane < blockDim.x / 32 ? shared[lane] : float2{-INFINITY, 0.0f};
    for (int o = 16; o > 0; o >>= 1)
      combine(w.x, w.y, __shfl_xor_sync(0xffffffffu, w.x, o), __shfl_xor_sync(0xffffffffu, w.y, o));
    if (lane == 0) shared[0] = w;
  }
  __syncthreads();
  m = shared[0].x;
  s = shared[0].y;
}

// One pass over the row (an online softmax: the running max rescales the running sum), so the
// logits are read once here and once in backward, as a fused classifier reads them.
template <typename T>
__global__ void stats_kernel(float* stats, const T* logits, const int32_t* targets, int64_t V) {
  __shared__ float2 shared[32];
  const int64_t n = blockIdx.x;
  if (targets[n] < 0) return;  // not counted: no statistics needed
  const T* x = logits + n * V;
  float m = -INFINITY, s = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float xv = ld(x[v]);
    if (xv > m) {
      s = s * expf(m - xv) + 1.0f;
      m = xv;
    } else if (xv != -INFINITY) {  // -inf adds nothing (and gives NaN while m is -inf)
      s += expf(xv - m);
    }
  }
  block_combine(m, s, shared);
  if (threadIdx.x == 0) {
    stats[2 * n] = m;
    stats[2 * n + 1] = logf(s);
  }
}

// A thread per row: the slices' (max, offset) pairs folded in slice order.
__global__ void merge_kernel(float* stats, const float* parts, const int32_t* targets, int64_t N,
                             int64_t R) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N || targets[n] < 0) return;
  float m = -INFINITY, s = 0;
  for (int64_t r = 0; r < R; ++r)
    combine(m, s, parts[(r * N + n) * 2], expf(parts[(r * N + n) * 2 + 1]));
  stats[2 * n] = m;
  stats[2 * n + 1] = logf(s);
}

// A thread per row: the loss of a target in this slice, else 0.
template <typename T>
__global__ void row_loss_kernel(double* row_loss, const T* logits, const float* stats,
                                const int32_t* targets, int64_t N, int64_t V, int64_t vocab_begin) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t t = int64_t(targets[n]) - vocab_begin;
  row_loss[n] =
      targets[n] < 0 || t < 0 || t >= V
          ? 0.0
          : (double(stats[2 * n]) - double(ld(logits[n * V + t]))) + double(stats[2 * n + 1]);
}

// loss_sum += the rows' losses: each thread sums rows i, i + kBlock, ... in order, then a fixed
// tree over the threads (the same bits every run).
__global__ void sum_rows_kernel(double* loss_sum, const double* row_loss, int64_t N) {
  __shared__ double shared[kBlock];
  double s = 0;
  for (int64_t n = threadIdx.x; n < N; n += kBlock) s += row_loss[n];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += shared[0];
}

template <typename T>
__global__ void backward_kernel(T* dlogits, const T* logits, const float* stats,
                                const int32_t* targets, const float* scale_ptr, int64_t V,
                                int64_t vocab_begin) {
  const int64_t n = blockIdx.x;
  const int64_t t = targets[n] < 0 ? -1 : int64_t(targets[n]) - vocab_begin;
  const float scale = *scale_ptr;
  T* d = dlogits + n * V;
  const T* x = logits + n * V;
  if (targets[n] < 0) {
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

void cross_entropy_stats(const Context& ctx, const Tensor& stats, const ConstTensor& logits,
                         const ConstTensor& targets) {
  const int64_t N = logits.rows(), V = logits.cols();
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    stats_kernel<<<unsigned(N), kBlock, 0, stream_of(ctx)>>>(ptr<float>(stats), ptr<T>(logits),
                                                             ptr<int32_t>(targets), V);
  });
  check_launch("cross_entropy_stats");
}

void cross_entropy_merge_stats(const Context& ctx, const Tensor& stats, const ConstTensor& parts,
                               const ConstTensor& targets) {
  const int64_t N = targets.numel();
  merge_kernel<<<blocks_for(N), kThreads, 0, stream_of(ctx)>>>(
      ptr<float>(stats), ptr<float>(parts), ptr<int32_t>(targets), N, parts.numel() / (2 * N));
  check_launch("cross_entropy_merge_stats");
}

void cross_entropy_loss(const Context& ctx, const Tensor& loss_sum, const ConstTensor& logits,
                        const ConstTensor& stats, const ConstTensor& targets, int64_t vocab_begin) {
  const int64_t N = logits.rows(), V = logits.cols();
  Workspace::Scope scratch(ctx.workspace);
  double* row_loss = scratch.take<double>(N);
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    row_loss_kernel<<<blocks_for(N), kThreads, 0, stream_of(ctx)>>>(
        row_loss, ptr<T>(logits), ptr<float>(stats), ptr<int32_t>(targets), N, V, vocab_begin);
  });
  sum_rows_kernel<<<1, kBlock, 0, stream_of(ctx)>>>(ptr<double>(loss_sum), row_loss, N);
  check_launch("cross_entropy_loss");
}

void cross_entropy_backward(const Context& ctx, const Tensor& dlogits, const ConstTensor& logits,
                            const ConstTensor& stats, const ConstTensor& targets,
                            const ConstTensor& scale, int64_t vocab_begin) {
  const int64_t N = logits.rows(), V = logits.cols();
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<<<unsigned(N), kBlock, 0, stream_of(ctx)>>>(
        ptr<T>(dlogits), ptr<T>(logits), ptr<float>(stats), ptr<int32_t>(targets),
        ptr<float>(scale), V, vocab_begin);
  });
  check_launch("cross_entropy_backward");
}

size_t cross_entropy_workspace(const Context&, int64_t N) {
  return Workspace::bytes_for<double>(N);
}

}  // namespace trainer::nn::cuda
