#include "nn/ops/residual.h"
#include "runtime/profile.h"

namespace trainer::nn {

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  PROFILE_SCOPE("residual_forward");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace trainer::nn
