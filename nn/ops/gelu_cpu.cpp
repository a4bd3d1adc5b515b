#include <cmath>

#include "nn/ops/gelu.h"
#include "nn/ops/vec_math.h"
#include "runtime/profile.h"

namespace trainer::nn {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
// tanh through exp, which vectorises: tanh(u) = 1 - 2 / (exp(2u) + 1).
inline float fast_tanh(float u) {
  return 1.0f - 2.0f / (vec_exp(2.0f * u) + 1.0f);
}
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  PROFILE_SCOPE("gelu_forward");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + fast_tanh(u));
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  PROFILE_SCOPE("gelu_backward");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    float th = fast_tanh(u);
    float sech2 = 1.0f - th * th;
    float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
  }
}

}  // namespace trainer::nn
