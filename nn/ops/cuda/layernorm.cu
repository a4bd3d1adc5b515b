// CUDA LayerNorm: a warp per row for the forward and the input gradient; the weight and bias
// gradients are column sums over the rows in a fixed order (column_sums.cuh: deterministic, no
// atomics).
#include "nn/ops/cuda/column_sums.cuh"
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

constexpr int kRowsPerBlock = 4;  // warps per block, a row each

// With `branch` (R its dtype), the rows normalised are res_out's, res_out[n] = res_in[n] +
// branch[n] written first (the fused residual add, each lane its own columns); `inp` is
// res_out then.
template <typename T, typename R = float>
__global__ void forward_kernel(T* out, float* mean, float* rstd, const float* inp, const T* w,
                               const T* b, int64_t N, int64_t C, float eps,
                               float* res_out = nullptr, const float* res_in = nullptr,
                               const R* branch = nullptr) {
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  if (branch)
    for (int64_t c = lane; c < C; c += 32)
      res_out[n * C + c] = res_in[n * C + c] + ld(branch[n * C + c]);
  const float* x = inp + n * C;
  float s = 0;
  for (int64_t c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / float(C);
  float v = 0;
  for (int64_t c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(warp_sum(v) / float(C) + eps);
  for (int64_t c = lane; c < C; c += 32) st(out[n * C + c], (x[c] - m) * r * ld(w[c]) + ld(b[c]));
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

template <typename T>
__global__ void input_grad_kernel(float* dinp, const T* dout, const float* inp, const T* w,
                                  const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  const T* d = dout + n * C;
  const float m = mean[n], r = rstd[n];
  float a = 0, b = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float dn = ld(w[c]) * ld(d[c]);
    a += dn;
    b += dn * (x[c] - m) * r;
  }
  a = warp_sum(a) / float(C);
  b = warp_sum(b) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * r;
    dinp[n * C + c] += (ld(w[c]) * ld(d[c]) - a - xhat * b) * r;
  }
}

// The weight and bias gradients' terms: xhat * dout and dout (column_sums).
template <typename T>
struct ParamGradTerms {
  const T* dout;
  const float *inp, *mean, *rstd;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, float* acc) const {
    const float d = ld(dout[n * C + c]);
    acc[0] += (inp[n * C + c] - mean[n]) * rstd[n] * d;
    acc[1] += d;
  }
};

}  // namespace

void layernorm_forward(const Context& ctx, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd, const ConstTensor& inp, const ConstTensor& w,
                       const ConstTensor& b, float eps) {
  const int64_t N = inp.rows(), C = inp.cols();
  const dim3 block(32, kRowsPerBlock);
  with_float(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<<<blocks_for(N, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
        ptr<T>(out), ptr<float>(mean), ptr<float>(rstd), ptr<float>(inp), ptr<T>(w), ptr<T>(b), N,
        C, eps);
  });
  check_launch("layernorm_forward");
}

void layernorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                                const Tensor& mean, const Tensor& rstd, const ConstTensor& res_in,
                                const ConstTensor& branch, const ConstTensor& w,
                                const ConstTensor& b, float eps) {
  const int64_t N = res_out.rows(), C = res_out.cols();
  const dim3 block(32, kRowsPerBlock);
  with_floats(out.dtype, branch.dtype, [&](auto ttag, auto rtag) {
    using T = decltype(ttag);
    using R = decltype(rtag);
    forward_kernel<<<blocks_for(N, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
        ptr<T>(out), ptr<float>(mean), ptr<float>(rstd), ptr<float>(res_out), ptr<T>(w), ptr<T>(b),
        N, C, eps, ptr<float>(res_out), ptr<float>(res_in), ptr<R>(branch));
  });
  check_launch("layernorm_residual_forward");
}

void layernorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& db,
                        const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                        const ConstTensor& mean, const ConstTensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  const dim3 block(32, kRowsPerBlock);
  with_floats(dout.dtype, dw.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    input_grad_kernel<<<blocks_for(N, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
        ptr<float>(dinp), ptr<T>(dout), ptr<float>(inp), ptr<T>(w), ptr<float>(mean),
        ptr<float>(rstd), N, C);
    column_sums<2>(
        ctx, ColumnOutputs<G, 2>{{ptr<G>(dw), ptr<G>(db)}},
        ParamGradTerms<T>{ptr<T>(dout), ptr<float>(inp), ptr<float>(mean), ptr<float>(rstd), C}, N,
        C);
  });
  check_launch("layernorm_backward");
}

size_t layernorm_backward_workspace(const Context&, int64_t C) {
  return column_sums_workspace(2, C);
}

}  // namespace trainer::nn::cuda
