#include <cmath>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

namespace {

// Rotates the first rd channels of every head of every row by +angle (sign 1) or -angle (sign
// -1), and multiplies them by rope.attention_factor. The frequencies and angles are computed in
// fp32 as PyTorch's Llama and GPT-NeoX do: rope_inv_freq, angle = float(pos) * inv_freq, cos and
// sin each times the attention factor.
template <typename T>
void rotate(T* x, int64_t ld, const int32_t* pos, int64_t N, int64_t H, int64_t hs, int64_t rd,
            const Rope& rope, float sign) {
  const int64_t half = rd / 2;
  float inv_freq[512];  // rd / 2 <= 512 (checked by the caller)
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = rope_inv_freq(rope, i, rd);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float c[512], s[512];
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(pos[n]) * inv_freq[i];
      c[i] = std::cos(angle) * rope.attention_factor;
      s[i] = sign * (std::sin(angle) * rope.attention_factor);
    }
    T* row = x + n * ld;
    for (int64_t h = 0; h < H; ++h) {
      T* a = row + h * hs;
      T* b = a + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = load(a[i]), x1 = load(b[i]);
        store(a[i], x0 * c[i] - x1 * s[i]);
        store(b[i], x1 * c[i] + x0 * s[i]);
      }
    }
  }
}

void run(const Tensor& x, const ConstTensor& positions, int head_size, int rotary_dims,
         const Rope& rope, float sign) {
  const int64_t N = x.rows(), width = x.cols();
  with_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    rotate(x.as<T>(), x.ld(), positions.as<int32_t>(), N, width / head_size, head_size, rotary_dims,
           rope, sign);
  });
}

}  // namespace

void rope_forward(const Context&, const Tensor& x, const ConstTensor& positions, int head_size,
                  int rotary_dims, const Rope& rope) {
  run(x, positions, head_size, rotary_dims, rope, 1.0f);
}

void rope_backward(const Context&, const Tensor& dx, const ConstTensor& positions, int head_size,
                   int rotary_dims, const Rope& rope) {
  run(dx, positions, head_size, rotary_dims, rope, -1.0f);
}

}  // namespace trainer::nn::cpu
