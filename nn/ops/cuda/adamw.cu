// CUDA AdamW: one thread per element, PyTorch's update order, the bf16 working copy written
// in the same pass (as the CPU kernel does).
#include <cmath>

#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

struct Coefficients {
  float b1, b2, eps, scale, step_size, inv_sqrt_bc2, decay;
};

template <typename G>
__global__ void update_kernel(float* p, const G* grads, float* m, float* v, bf16_t* working,
                              int64_t n, Coefficients k) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = ld(grads[i]) * k.scale;
  const float mi = k.b1 * m[i] + (1.0f - k.b1) * g;
  const float vi = k.b2 * v[i] + (1.0f - k.b2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float pi = p[i] * k.decay - k.step_size * mi / (sqrtf(vi) * k.inv_sqrt_bc2 + k.eps);
  p[i] = pi;
  if (working) working[i] = __float2bfloat16_rn(pi);
}

}  // namespace

void adamw_update(const Context& ctx, const Tensor& params, const ConstTensor& grads,
                  const Tensor& m, const Tensor& v, const Tensor& working, const AdamWHyper& h) {
  const int64_t n = params.numel();
  const float bc1 = 1.0f - std::pow(h.beta1, float(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, float(h.step));
  const Coefficients k{h.beta1,
                       h.beta2,
                       h.eps,
                       h.grad_scale,
                       h.lr / bc1,
                       1.0f / std::sqrt(bc2),
                       1.0f - h.lr * h.weight_decay};
  with_float(grads.dtype, [&](auto tag) {
    using G = decltype(tag);
    update_kernel<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(
        ptr<float>(params), ptr<G>(grads), ptr<float>(m), ptr<float>(v),
        working.empty() ? nullptr : ptr<bf16_t>(working), n, k);
  });
  check_launch("adamw_update");
}

}  // namespace trainer::nn::cuda
