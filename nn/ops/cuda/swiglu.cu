// CUDA SwiGLU: one thread per hidden element of a row, fp32 arithmetic.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gu, int64_t N, int64_t F) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * F) return;
  const int64_t n = i / F, f = i % F;
  const float x = ld(gu[n * 2 * F + f]), s = 1.0f / (1.0f + expf(-x));
  st(out[i], x * s * ld(gu[n * 2 * F + F + f]));
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* dout, const T* gu, int64_t N, int64_t F) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * F) return;
  const int64_t n = i / F, f = i % F;
  const float x = ld(gu[n * 2 * F + f]), u = ld(gu[n * 2 * F + F + f]);
  const float s = 1.0f / (1.0f + expf(-x)), dy = ld(dout[i]);
  st(dgu[n * 2 * F + f], dy * u * s * (1.0f + x * (1.0f - s)));
  st(dgu[n * 2 * F + F + f], dy * x * s);
}

}  // namespace

void swiglu_forward(const Context& ctx, const Tensor& out, const ConstTensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  with_float(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<<<blocks_for(N * F), kThreads, 0, stream_of(ctx)>>>(
        ptr<T>(out), ptr<T>(gate_up), N, F);
  });
  check_launch("swiglu_forward");
}

void swiglu_backward(const Context& ctx, const Tensor& dgate_up, const ConstTensor& dout,
                     const ConstTensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  with_float(dout.dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<<<blocks_for(N * F), kThreads, 0, stream_of(ctx)>>>(
        ptr<T>(dgate_up), ptr<T>(dout), ptr<T>(gate_up), N, F);
  });
  check_launch("swiglu_backward");
}

}  // namespace trainer::nn::cuda
