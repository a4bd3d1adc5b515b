// CUDA residual add: one thread per element.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

template <typename T>
__global__ void residual_kernel(float* out, const float* a, const T* b, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + ld(b[i]);
}

}  // namespace

void residual_forward(const Context& ctx, const Tensor& out, const ConstTensor& a,
                      const ConstTensor& b) {
  const int64_t n = a.numel();
  with_float(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    residual_kernel<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(ptr<float>(out), ptr<float>(a),
                                                                    ptr<T>(b), n);
  });
  check_launch("residual_forward");
}

}  // namespace trainer::nn::cuda
