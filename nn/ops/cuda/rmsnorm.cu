// CUDA RMSNorm: a warp per row for the forward and the input gradient; the weight gradient is a
// column sum over the rows in a fixed order (column_sums.cuh: deterministic, no atomics).
#include "nn/ops/cuda/column_sums.cuh"
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

constexpr int kRowsPerBlock = 4;

// With `branch` (R its dtype), the rows normalised are res_out's, res_out[n] = res_in[n] +
// branch[n] written first (the fused residual add, each lane its own columns); `inp` is
// res_out then.
template <typename T, typename R = float>
__global__ void forward_kernel(T* out, float* rstd, const float* inp, const T* w, int64_t N,
                               int64_t C, float eps, float* res_out = nullptr,
                               const float* res_in = nullptr, const R* branch = nullptr) {
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  if (branch)
    for (int64_t c = lane; c < C; c += 32)
      res_out[n * C + c] = res_in[n * C + c] + ld(branch[n * C + c]);
  const float* x = inp + n * C;
  float ss = 0;
  for (int64_t c = lane; c < C; c += 32) ss += x[c] * x[c];
  const float r = rsqrtf(warp_sum(ss) / float(C) + eps);
  for (int64_t c = lane; c < C; c += 32) st(out[n * C + c], x[c] * r * ld(w[c]));
  if (lane == 0) rstd[n] = r;
}

template <typename T>
__global__ void input_grad_kernel(float* dinp, const T* dout, const float* inp, const T* w,
                                  const float* rstd, int64_t N, int64_t C) {
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  const T* d = dout + n * C;
  const float r = rstd[n];
  float dot = 0;
  for (int64_t c = lane; c < C; c += 32) dot += ld(w[c]) * ld(d[c]) * x[c] * r;
  dot = warp_sum(dot) / float(C);
  for (int64_t c = lane; c < C; c += 32)
    dinp[n * C + c] += (ld(w[c]) * ld(d[c]) - x[c] * r * dot) * r;
}

// The weight gradient's term: x * rstd * dout (column_sums).
template <typename T>
struct WeightGradTerm {
  const T* dout;
  const float *inp, *rstd;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, float* acc) const {
    acc[0] += inp[n * C + c] * rstd[n] * ld(dout[n * C + c]);
  }
};

}  // namespace

void rmsnorm_forward(const Context& ctx, const Tensor& out, const Tensor& rstd,
                     const ConstTensor& inp, const ConstTensor& w, float eps) {
  const int64_t N = inp.rows(), C = inp.cols();
  const dim3 block(32, kRowsPerBlock);
  with_float(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<<<blocks_for(N, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
        ptr<T>(out), ptr<float>(rstd), ptr<float>(inp), ptr<T>(w), N, C, eps);
  });
  check_launch("rmsnorm_forward");
}

void rmsnorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                              const Tensor& rstd, const ConstTensor& res_in,
                              const ConstTensor& branch, const ConstTensor& w, float eps) {
  const int64_t N = res_out.rows(), C = res_out.cols();
  const dim3 block(32, kRowsPerBlock);
  with_floats(out.dtype, branch.dtype, [&](auto ttag, auto rtag) {
    using T = decltype(ttag);
    using R = decltype(rtag);
    forward_kernel<<<blocks_for(N, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
        ptr<T>(out), ptr<float>(rstd), ptr<float>(res_out), ptr<T>(w), N, C, eps,
        ptr<float>(res_out), ptr<float>(res_in), ptr<R>(branch));
  });
  check_launch("rmsnorm_residual_forward");
}

void rmsnorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw,
                      const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                      const ConstTensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  const dim3 block(32, kRowsPerBlock);
  with_floats(dout.dtype, dw.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    input_grad_kernel<<<blocks_for(N, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
        ptr<float>(dinp), ptr<T>(dout), ptr<float>(inp), ptr<T>(w), ptr<float>(rstd), N, C);
    column_sums<1>(ctx, ColumnOutputs<G, 1>{{ptr<G>(dw)}},
                   WeightGradTerm<T>{ptr<T>(dout), ptr<float>(inp), ptr<float>(rstd), C}, N, C);
  });
  check_launch("rmsnorm_backward");
}

size_t rmsnorm_backward_workspace(const Context&, int64_t C) {
  return column_sums_workspace(1, C);
}

}  // namespace trainer::nn::cuda
