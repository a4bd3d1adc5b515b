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
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; ++v) mx = std::max(mx, row[v]);
    float z = 0;
#pragma omp simd reduction(+ : z)
    for (int v = 0; v < V; ++v) {
      float e = vec_exp(row[v] - mx);
      row[v] = e;
      z += e;
    }
    float inv = 1.0f / z;
#pragma omp simd
    for (int v = 0; v < V; ++v) row[v] *= inv;
    if (targets[n] >= 0)  // -log p = log-sum-exp - logit, stable where p underflows
      row_loss[size_t(n)] = double(mx) + std::log(double(z)) - double(target_logit);
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
