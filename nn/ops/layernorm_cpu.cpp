#include <omp.h>

#include <cmath>
#include <vector>

#include "nn/ops/layernorm.h"
#include "runtime/profile.h"

namespace trainer::nn {

constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int C) {
  PROFILE_SCOPE("layernorm_forward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += x[c];
    float m = s / float(C);
    float v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    float r = 1.0f / std::sqrt(v / float(C) + kLayerNormEps);
    float* o = out + n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * r * w[c] + b[c];
    mean[n] = m;
    rstd[n] = r;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t N, int C) {
  PROFILE_SCOPE("layernorm_backward");
  // Each thread sums its rows' dw/db into a private row; the partial rows are then added in
  // thread order, so the result does not depend on scheduling.
  int threads = omp_get_max_threads();
  std::vector<float> partial(size_t(threads) * 2 * C, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    float* pdw = partial.data() + size_t(t) * 2 * C;
    float* pdb = pdw + C;
    int64_t n0 = N * t / threads, n1 = N * (t + 1) / threads;
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      float m = mean[n], r = rstd[n];
      float dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        float xhat = (x[c] - m) * r;
        float dn = w[c] * d[c];
        dnorm_mean += dn;
        dnorm_norm_mean += dn * xhat;
      }
      dnorm_mean /= float(C);
      dnorm_norm_mean /= float(C);
      float* di = dinp + n * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        float xhat = (x[c] - m) * r;
        pdb[c] += d[c];
        pdw[c] += xhat * d[c];
        di[c] += (w[c] * d[c] - dnorm_mean - xhat * dnorm_norm_mean) * r;
      }
    }
  }
  for (int t = 0; t < threads; ++t) {
    const float* pdw = partial.data() + size_t(t) * 2 * C;
    for (int c = 0; c < C; ++c) {
      dw[c] += pdw[c];
      db[c] += pdw[C + c];
    }
  }
}

}  // namespace trainer::nn
