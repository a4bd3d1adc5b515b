#include <algorithm>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/cpu/sums.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

void residual_forward(const Context& ctx, const Tensor& out, const ConstTensor& a,
                      const ConstTensor& b) {
  float* o = out.as<float>();
  const float* x = a.as<float>();
  const int64_t n = a.numel();
  constexpr int64_t kChunk = 4096;  // elements a thread adds at a time
  with_float(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* y = b.as<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += kChunk)
      residual_add(o + i, x + i, y + i, std::min(kChunk, n - i));
  });
}

}  // namespace trainer::nn::cpu
