#include <omp.h>

#include <vector>

#include "nn/ops/linear.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"

namespace trainer::nn {

void linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N,
                    int I, int O) {
  PROFILE_SCOPE("linear_forward");
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float* o = out + n * O;
#pragma omp simd
      for (int j = 0; j < O; ++j) o[j] = bias[j];
    }
  }
  gemm(false, false, N, O, I, 1.0f, inp, I, w, O, bias ? 1.0f : 0.0f, out, O);
}

void add_column_sums(float* out, const float* x, int64_t N, int O) {
  int threads = omp_get_max_threads();
  // Threads own column slices: no partial buffers, rows summed in order.
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    int j0 = int(int64_t(O) * t / threads), j1 = int(int64_t(O) * (t + 1) / threads);
    for (int64_t n = 0; n < N; ++n) {
      const float* row = x + n * O;
#pragma omp simd
      for (int j = j0; j < j1; ++j) out[j] += row[j];
    }
  }
}

void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int64_t N, int I, int O) {
  PROFILE_SCOPE("linear_backward");
  if (dinp) gemm(false, true, N, I, O, 1.0f, dout, O, w, O, 0.0f, dinp, I);
  gemm(true, false, I, O, N, 1.0f, inp, I, dout, O, 1.0f, dw, O);
  if (dbias) add_column_sums(dbias, dout, N, O);
}

}  // namespace trainer::nn
