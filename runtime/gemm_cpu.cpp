#include <dnnl.h>

#include <algorithm>
#include <vector>

#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/timer.h"

namespace trainer {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                ldb, beta, C, ldc);
  CHECK(st == dnnl_success, "oneDNN sgemm failed (status {}) for M={} N={} K={}", int(st), M, N, K);
}

double measure_gemm_gflops(int64_t n, double min_seconds) {
  // The best of several short trials: a peak, robust to a noisy neighbour in some of them.
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
  const double flops = 2.0 * double(n) * double(n) * double(n);
  double best = 0;
  Timer total;
  do {
    Timer t;
    gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, flops / t.seconds() / 1e9);
  } while (total.seconds() < min_seconds);
  return best;
}

double measure_gemm_peak(double seconds) {
  double best = 0;
  for (int64_t n : {256, 512, 1024, 2048})
    best = std::max(best, measure_gemm_gflops(n, seconds / 4));
  return best;
}

}  // namespace trainer
