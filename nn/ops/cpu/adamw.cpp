#include <cmath>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

namespace {

template <typename G, bool kWorking>
void update(float* p, const G* grads, float* m, float* v, bf16* working, int64_t n,
            const AdamWHyper& h) {
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps, scale = h.grad_scale;
  const float bc1 = 1.0f - std::pow(b1, float(h.step));
  const float bc2 = 1.0f - std::pow(b2, float(h.step));
  const float step_size = h.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - h.lr * h.weight_decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = load(grads[i]) * scale;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    p[i] = pi;
    if constexpr (kWorking) working[i] = to_bf16(pi);
  }
}

}  // namespace

void adamw_update(const Context& ctx, const Tensor& params, const ConstTensor& grads,
                  const Tensor& m, const Tensor& v, const Tensor& working, const AdamWHyper& h) {
  const int64_t n = params.numel();
  with_float(grads.dtype, [&](auto tag) {
    using G = decltype(tag);
    if (working.empty())
      update<G, false>(params.as<float>(), grads.as<G>(), m.as<float>(), v.as<float>(), nullptr, n,
                       h);
    else
      update<G, true>(params.as<float>(), grads.as<G>(), m.as<float>(), v.as<float>(),
                      working.as<bf16>(), n, h);
  });
}

}  // namespace trainer::nn::cpu
