#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nn/ops/cross_entropy.h"
#include "nn/ops/vec_math.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace trainer::nn {

LossSum cross_entropy_forward(float* logits, const int32_t* targets, int64_t N, int V) {
  PROFILE_SCOPE("cross_entropy_forward");
  for (int64_t n = 0; n < N; ++n)
    CHECK(targets[n] >= -1 && targets[n] < V,
          "target id {} at position {} is outside the vocab [0, {})", targets[n], n, V);
  std::vector<double> row_loss(size_t(N), 0.0);  // summed in order below: deterministic
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = logits + n * V;
    const float target_logit = targets[n] >= 0 ? row[targets[n]] : 0.0f;
    const float lse = softmax_row(row, V);
    if (targets[n] >= 0)  // -log p = log-sum-exp - logit, stable where p underflows
      row_loss[size_t(n)] = double(lse) - double(target_logit);
  }
  LossSum out;
  for (int64_t n = 0; n < N; ++n) {
    out.sum += row_loss[size_t(n)];
    out.count += targets[n] >= 0;
  }
  return out;
}

void cross_entropy_backward(float* probs, const int32_t* targets, int64_t N, int V, float scale) {
  PROFILE_SCOPE("cross_entropy_backward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = probs + n * V;
    if (targets[n] < 0) {
      std::fill(row, row + V, 0.0f);
      continue;
    }
#pragma omp simd
    for (int v = 0; v < V; ++v) row[v] *= scale;
    row[targets[n]] -= scale;
  }
}

}  // namespace trainer::nn
