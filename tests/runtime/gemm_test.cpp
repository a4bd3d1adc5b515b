#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/op_env.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"
#include "runtime/rng.h"

namespace trainer {

using testing::OpEnv;

namespace {

// Naive reference for C = alpha op(A) op(B) + beta C (+ bias).
void reference(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc,
               const float* bias = nullptr) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = float(alpha * s + beta * C[i * ldc + j] + (bias ? bias[j] : 0.0f));
    }
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = to_float(to_bf16(x));
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out;
  for (float x : v) out.push_back(trainer::to_bf16(x));
  return out;
}

}  // namespace

TEST(Gemm, SgemmMatchesReferenceForAllTransposes) {
  const int M = 13, N = 17, K = 29, ld = 40;
  std::vector<float> A(ld * ld), B(ld * ld), C0(ld * ld);
  fill_normal(A.data(), ld * ld, 1, 0, 1);
  fill_normal(B.data(), ld * ld, 2, 0, 1);
  fill_normal(C0.data(), ld * ld, 3, 0, 1);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> got = C0, want = C0;
      sgemm(ta, tb, M, N, K, 0.5f, A.data(), ld, B.data(), ld, 0.25f, got.data(), ld);
      reference(ta, tb, M, N, K, 0.5f, A.data(), ld, B.data(), ld, 0.25f, want.data(), ld);
      // |C| < ~10; fp32 sums of depth 29 in any order are within 29 x 2^-24 x sum|terms| (< 2e-5).
      for (int i = 0; i < ld * ld; ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << ta << tb << i;
    }
}

// A product reports its shape to the innermost profile scope (Note [Profile work]); the rate at
// a shape is measured on operands laid out as the shape says (transposes included), and those
// trials are not the profile's work.
TEST(Gemm, ProductsReportTheirShapeAndRatesAreMeasuredPerShape) {
  OpEnv env;
  const int64_t M = 6, N = 5, K = 3;
  std::vector<float> a(size_t(K * M), 1.0f), b(size_t(N * K), 1.0f), c(size_t(M * N));
  profile::set_enabled(true);
  profile::reset();
  {
    PROFILE_SCOPE("product", "gemm");
    matmul(env.ctx, testing::view(c, {M, N}), testing::view(a, {K, M}), true,
           testing::view(b, {N, K}), true);
    const profile::GemmShape shape{M, N, K, true, true, DType::f32, DType::f32};
    const double gflops = measure_gemm_gflops(env.ctx, shape, 0.0);
    EXPECT_TRUE(std::isfinite(gflops) && gflops > 0) << gflops;
  }
  profile::set_enabled(false);
  const std::vector<profile::Entry> report = profile::report();
  ASSERT_EQ(report.size(), 1u);
  const profile::GemmShape want{M, N, K, true, true, DType::f32, DType::f32};
  ASSERT_EQ(report[0].products.size(), 1u);
  EXPECT_EQ(report[0].products.at(want), 1);
  EXPECT_EQ(report[0].flops(), 2.0 * M * N * K);
  EXPECT_EQ(c[0], float(K));  // the product ran: every element the sum of K ones
  profile::reset();
}

// matmul on strided fp32 and bf16 operands (both CPU bf16 paths), into fp32 and bf16 results,
// with alpha, beta and a bias, against the reference on the same (bf16-rounded) inputs.
class Matmul : public ::testing::TestWithParam<CpuBf16Math> {};

TEST_P(Matmul, MatchesReferenceInEveryDtypeAndOrientation) {
  if (GetParam() == CpuBf16Math::native && !cpu_has_bf16_arithmetic())
    GTEST_SKIP() << "this CPU has no bf16 arithmetic (AVX-512 BF16 or AMX)";
  OpEnv env(GetParam());
  // Odd sizes, several strips in the fp32-conversion path (K large relative to the budget is
  // not needed: the strip logic is exercised by both operand orders).
  const int M = 37, N = 53, K = 71, ld = 80;
  std::vector<float> A(size_t(ld) * ld), B(size_t(ld) * ld), C0(size_t(ld) * ld), bias(N);
  fill_normal(A.data(), int64_t(A.size()), 1, 0, 1);
  fill_normal(B.data(), int64_t(B.size()), 2, 0, 1);
  fill_normal(C0.data(), int64_t(C0.size()), 3, 0, 1);
  fill_normal(bias.data(), N, 4, 0, 1);
  for (DType ab : {DType::f32, DType::bf16})
    for (DType c : {DType::f32, DType::bf16}) {
      if (ab == DType::f32 && c == DType::bf16) continue;
      const std::vector<float> a = ab == DType::bf16 ? rounded(A) : A;
      const std::vector<float> b = ab == DType::bf16 ? rounded(B) : B;
      std::vector<bf16> a16 = to_bf16(A), b16 = to_bf16(B);
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (int variant = 0; variant < 2; ++variant) {  // 0: alpha/beta, 1: bias
            const float alpha = variant ? 1.0f : 0.5f, beta = variant ? 0.0f : 0.25f;
            std::vector<float> want = c == DType::bf16 ? rounded(C0) : C0;
            reference(ta, tb, M, N, K, alpha, a.data(), ld, b.data(), ld, beta, want.data(), ld,
                      variant ? bias.data() : nullptr);
            std::vector<float> got32 = C0;          // the result when C is fp32
            std::vector<bf16> got16 = to_bf16(C0);  // the result when C is bf16
            Tensor At = make_tensor(ab == DType::f32 ? (void*)A.data() : (void*)a16.data(), ab,
                                    {ta ? K : M, ta ? M : K});
            Tensor Bt = make_tensor(ab == DType::f32 ? (void*)B.data() : (void*)b16.data(), ab,
                                    {tb ? N : K, tb ? K : N});
            At.row_stride = ld;
            Bt.row_stride = ld;
            Tensor Ct =
                make_tensor(c == DType::f32 ? (void*)got32.data() : (void*)got16.data(), c, {M, N});
            Ct.row_stride = ld;
            const ConstTensor bias_t = testing::view(bias, {N});
            matmul(env.ctx, Ct, At, ta, Bt, tb, alpha, beta, variant ? &bias_t : nullptr);
            double err = 0, scale = 0;
            for (int i = 0; i < M; ++i)
              for (int j = 0; j < N; ++j) {
                const float g = c == DType::f32 ? got32[i * ld + j] : to_float(got16[i * ld + j]);
                err = std::max(err, double(std::fabs(g - want[i * ld + j])));
                scale = std::max(scale, double(std::fabs(want[i * ld + j])));
              }
            // fp32: summation order only, ~sqrt(71) 2^-24 of the partial sums (< 1e-6 of the
            // largest element; bf16 dot-product instructions round as FMAs do); a bf16 result:
            // one rounding (2^-9 relative at most), 4x under the bound.
            const double tol = c == DType::bf16 ? 8e-3 : 1e-5;
            EXPECT_LT(err / scale, tol) << dtype_name(ab) << "->" << dtype_name(c) << " ta=" << ta
                                        << " tb=" << tb << " variant=" << variant;
            // Elements outside the (M, N) block are untouched.
            if (c == DType::f32) {
              EXPECT_EQ(got32[M * ld + 1], C0[M * ld + 1]);
            }
          }
    }
}

INSTANTIATE_TEST_SUITE_P(CpuBf16Paths, Matmul,
                         ::testing::Values(CpuBf16Math::via_fp32, CpuBf16Math::native),
                         [](const auto& info) {
                           return info.param == CpuBf16Math::native ? "native" : "via_fp32";
                         });

}  // namespace trainer
