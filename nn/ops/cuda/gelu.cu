// CUDA GELU (the tanh form or the exact one): one thread per element, fp32 arithmetic.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

constexpr float kSqrtHalf = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

template <GeluForm form>
__device__ float gelu(float x) {
  if constexpr (form == GeluForm::erf) return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

template <GeluForm form>
__device__ float gelu_grad(float x) {
  if constexpr (form == GeluForm::erf)
    return 0.5f * (1.0f + erff(x * kSqrtHalf)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float th = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

template <GeluForm form, typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) st(out[i], gelu<form>(ld(inp[i])));
}

template <GeluForm form, typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) st(dinp[i], ld(dout[i]) * gelu_grad<form>(ld(inp[i])));
}

}  // namespace

void gelu_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp, GeluForm form) {
  const int64_t n = inp.numel();
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* kernel = form == GeluForm::erf ? gelu_forward_kernel<GeluForm::erf, T>
                                         : gelu_forward_kernel<GeluForm::tanh, T>;
    kernel<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(ptr<T>(out), ptr<T>(inp), n);
  });
  check_launch("gelu_forward");
}

void gelu_backward(const Context& ctx, const Tensor& dinp, const ConstTensor& dout,
                   const ConstTensor& inp, GeluForm form) {
  const int64_t n = inp.numel();
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* kernel = form == GeluForm::erf ? gelu_backward_kernel<GeluForm::erf, T>
                                         : gelu_backward_kernel<GeluForm::tanh, T>;
    kernel<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(ptr<T>(dinp), ptr<T>(dout), ptr<T>(inp),
                                                           n);
  });
  check_launch("gelu_backward");
}

}  // namespace trainer::nn::cuda
