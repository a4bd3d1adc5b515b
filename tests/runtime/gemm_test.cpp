#include <gtest/gtest.h>

#include <vector>

#include "runtime/gemm.h"
#include "runtime/rng.h"

namespace trainer {

// Naive reference for C = alpha op(A) op(B) + beta C.
static void reference(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = float(alpha * s + beta * C[i * ldc + j]);
    }
}

TEST(Gemm, MatchesReferenceForAllTransposes) {
  const int M = 13, N = 17, K = 29, ld = 40;
  std::vector<float> A(ld * ld), B(ld * ld), C0(ld * ld);
  fill_normal(A.data(), ld * ld, 1, 0, 1);
  fill_normal(B.data(), ld * ld, 2, 0, 1);
  fill_normal(C0.data(), ld * ld, 3, 0, 1);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> got = C0, want = C0;
      gemm(ta, tb, M, N, K, 0.5f, A.data(), ld, B.data(), ld, 0.25f, got.data(), ld);
      reference(ta, tb, M, N, K, 0.5f, A.data(), ld, B.data(), ld, 0.25f, want.data(), ld);
      for (int i = 0; i < ld * ld; ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << ta << tb << i;
    }
}

}  // namespace trainer
