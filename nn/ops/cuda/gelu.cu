// CUDA GELU (tanh approximation): one thread per element, fp32 arithmetic.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = ld(inp[i]);
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  st(out[i], 0.5f * x * (1.0f + tanhf(u)));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = ld(inp[i]);
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float th = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  st(dinp[i], ld(dout[i]) * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
}

}  // namespace

void gelu_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp) {
  const int64_t n = inp.numel();
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(ptr<T>(out), ptr<T>(inp),
                                                                        n);
  });
  check_launch("gelu_forward");
}

void gelu_backward(const Context& ctx, const Tensor& dinp, const ConstTensor& dout,
                   const ConstTensor& inp) {
  const int64_t n = inp.numel();
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(ptr<T>(dinp), ptr<T>(dout),
                                                                         ptr<T>(inp), n);
  });
  check_launch("gelu_backward");
}

}  // namespace trainer::nn::cuda
