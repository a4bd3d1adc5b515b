#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"
#include "nn/ops/cpu/vec_math.h"

namespace trainer::nn::cpu {

namespace {

inline float sigmoid(float x) {
  return 1.0f / (1.0f + vec_exp(-x));
}

template <typename T>
void forward(T* out, const T* gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = gu + n * 2 * F;
    const T* u = g + F;
    T* o = out + n * F;
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) {
      const float x = load(g[i]);
      store(o[i], x * sigmoid(x) * load(u[i]));
    }
  }
}

// d gate = dout * up * silu'(gate), silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x);
// d up = dout * silu(gate).
template <typename T>
void backward(T* dgu, const T* dout, const T* gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = gu + n * 2 * F;
    const T* u = g + F;
    const T* d = dout + n * F;
    T* dg = dgu + n * 2 * F;
    T* du = dg + F;
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) {
      const float x = load(g[i]), s = sigmoid(x), dy = load(d[i]);
      store(dg[i], dy * load(u[i]) * s * (1.0f + x * (1.0f - s)));
      store(du[i], dy * x * s);
    }
  }
}

}  // namespace

void swiglu_forward(const Context&, const Tensor& out, const ConstTensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  with_float(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward(out.as<T>(), gate_up.as<T>(), N, F);
  });
}

void swiglu_backward(const Context&, const Tensor& dgate_up, const ConstTensor& dout,
                     const ConstTensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  with_float(dout.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward(dgate_up.as<T>(), dout.as<T>(), gate_up.as<T>(), N, F);
  });
}

}  // namespace trainer::nn::cpu
