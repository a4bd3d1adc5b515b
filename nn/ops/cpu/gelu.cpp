#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"
#include "nn/ops/cpu/vec_math.h"

namespace trainer::nn::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// tanh through exp, which vectorises: tanh(u) = 1 - 2 / (exp(2u) + 1).
inline float fast_tanh(float u) {
  return 1.0f - 2.0f / (vec_exp(2.0f * u) + 1.0f);
}

template <typename T>
void forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(inp[i]);
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    store(out[i], 0.5f * x * (1.0f + fast_tanh(u)));
  }
}

template <typename T>
void backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(inp[i]);
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float th = fast_tanh(u);
    const float sech2 = 1.0f - th * th;
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    store(dinp[i], load(dout[i]) * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du));
  }
}

}  // namespace

void gelu_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp) {
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward(out.as<T>(), inp.as<T>(), inp.numel());
  });
}

void gelu_backward(const Context& ctx, const Tensor& dinp, const ConstTensor& dout,
                   const ConstTensor& inp) {
  with_float(inp.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward(dinp.as<T>(), dout.as<T>(), inp.as<T>(), inp.numel());
  });
}

}  // namespace trainer::nn::cpu
