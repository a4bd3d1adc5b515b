// Elementwise math that the compiler can vectorise inside `#pragma omp simd` loops (libm's
// expf is a scalar call there). Used by GELU and the softmaxes.
#pragma once

#include <bit>
#include <cstdint>

namespace trainer::nn {

// e^x with about 2 ulp error on [-87.3, 88.3]; 0 below (so exp(-inf) == 0 exactly), and
// saturating above. Range reduction x = n ln2 + r, then a degree-6 polynomial for e^r.
inline float vec_exp(float x) {
  const float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  // Round to nearest by adding and removing 1.5 * 2^23 (vectorises, unlike roundevenf).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;  // ln2 split in two for an exact product
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);
  return x < -87.3f ? 0.0f : p * scale;
}

// Replaces row[0, n) by its softmax in place and returns the row's log-sum-exp
// (max + log(sum of exp)); -inf entries get probability 0. Shared by attention and the loss.
inline float softmax_row(float* row, int64_t n) {
  float mx = -__builtin_inff();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = row[i] > mx ? row[i] : mx;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = vec_exp(row[i] - mx);
    row[i] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) row[i] *= inv;
  return mx + __builtin_logf(sum);
}

}  // namespace trainer::nn
