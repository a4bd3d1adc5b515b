#include <cmath>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/cpu/vec_math.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// tanh through exp, which vectorises: tanh(u) = 1 - 2 / (exp(2u) + 1).
inline float fast_tanh(float u) {
  return 1.0f - 2.0f / (vec_exp(2.0f * u) + 1.0f);
}

constexpr float kSqrtHalf = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

// gelu(x) and gelu'(x) in either form.
template <GeluForm form>
inline float gelu(float x) {
  if constexpr (form == GeluForm::erf) return 0.5f * x * (1.0f + std::erf(x * kSqrtHalf));
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + fast_tanh(u));
}
template <GeluForm form>
inline float gelu_grad(float x) {
  if constexpr (form == GeluForm::erf)
    return 0.5f * (1.0f + std::erf(x * kSqrtHalf)) + x * kInvSqrt2Pi * vec_exp(-0.5f * x * x);
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float th = fast_tanh(u);
  const float sech2 = 1.0f - th * th;
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

template <GeluForm form, typename T>
void forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) store(out[i], gelu<form>(load(inp[i])));
}

template <GeluForm form, typename T>
void backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) store(dinp[i], load(dout[i]) * gelu_grad<form>(load(inp[i])));
}

}  // namespace

void gelu_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp, GeluForm form) {
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (form == GeluForm::erf)
      forward<GeluForm::erf>(out.as<T>(), inp.as<T>(), inp.numel());
    else
      forward<GeluForm::tanh>(out.as<T>(), inp.as<T>(), inp.numel());
  });
}

void gelu_backward(const Context& ctx, const Tensor& dinp, const ConstTensor& dout,
                   const ConstTensor& inp, GeluForm form) {
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (form == GeluForm::erf)
      backward<GeluForm::erf>(dinp.as<T>(), dout.as<T>(), inp.as<T>(), inp.numel());
    else
      backward<GeluForm::tanh>(dinp.as<T>(), dout.as<T>(), inp.as<T>(), inp.numel());
  });
}

}  // namespace trainer::nn::cpu
