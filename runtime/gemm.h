// Row-major fp32 matrix multiply on the CPU through oneDNN's GEMM, the fastest library
// measured on the target machines (scripts/bench/gemm.sh prints the comparison).
#pragma once

#include <cstdint>

namespace trainer {

// C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C, all row-major with leading dimensions
// lda/ldb/ldc; op(X) is X or its transpose. Threads internally unless called inside a
// parallel region.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// This machine's fp32 GEMM rate (GFLOP/s) on n x n x n products: the best single product
// over min_seconds of trials, using all threads.
double measure_gemm_gflops(int64_t n, double min_seconds);

// The peak against which CPU MFU is reported: the best measure_gemm_gflops over sizes 256 to
// 2048 (smaller products can run faster from cache), taking about `seconds` in all.
double measure_gemm_peak(double seconds = 1.0);

}  // namespace trainer
