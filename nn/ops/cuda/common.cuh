// What the CUDA kernels share: the stream of a context, fp32/bf16 loads and stores, the
// runtime dtype turned into a template parameter (as cpu/dtype.h does for the CPU), warp
// reductions and launch checks. Only included from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/context.h"
#include "runtime/cuda/check.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace trainer::nn::cuda {

using bf16_t = __nv_bfloat16;

inline cudaStream_t stream_of(const Context& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

__device__ __forceinline__ float ld(float x) {
  return x;
}
__device__ __forceinline__ float ld(bf16_t x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ void st(float& d, float x) {
  d = x;
}
__device__ __forceinline__ void st(bf16_t& d, float x) {
  d = __float2bfloat16_rn(x);
}

// A tensor's device elements, T being the dtype's device type (bf16_t for bf16): writable for
// a Tensor, read-only for a ConstTensor.
template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data);
}
template <typename T>
const T* ptr(const ConstTensor& t) {
  return static_cast<const T*>(t.data);
}

// fn(float{}) or fn(bf16_t{}) for an fp32 or bf16 dtype.
template <typename Fn>
void with_float(DType t, Fn&& fn) {
  if (t == DType::f32) return fn(float{});
  TRAINER_ASSERT(t == DType::bf16, "a CUDA kernel for {}", dtype_name(t));
  fn(bf16_t{});
}

template <typename Fn>
void with_floats(DType a, DType b, Fn&& fn) {
  with_float(a, [&](auto ta) { with_float(b, [&](auto tb) { fn(ta, tb); }); });
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 2147483647 ? 2147483647 : b));
}

// Reports a failed launch at once, naming the kernel.
inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  CHECK(err == cudaSuccess, "CUDA kernel {} failed to launch: {}", kernel, cudaGetErrorString(err));
}

}  // namespace trainer::nn::cuda
