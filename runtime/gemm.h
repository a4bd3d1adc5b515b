// Matrix products. `matmul` is what ops call: fp32 or bf16 operands with fp32 accumulation,
// on the context's device (CPU: oneDNN; see Note [CPU bf16 matmul]). `sgemm` is the plain fp32
// kernel on host pointers, for kernels that multiply small tiles inside their own threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.h"
#include "runtime/dtype.h"
#include "runtime/profile.h"
#include "runtime/tensor.h"

namespace trainer {

// C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C, all row-major with leading dimensions
// lda/ldb/ldc; op(X) is X or its transpose. Threads internally unless called inside a
// parallel region.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C(M,N) = alpha * op(A) op(B) + beta * C, plus bias(N) added to every row when given (then
// beta must be 0). A and B are both fp32 or both bf16, each a matrix (rows, cols) with a row
// stride: op(A) is A, or A transposed when trans_a (likewise B). C is fp32 or bf16 (bf16 C
// needs bf16 A and B); the bias has C's dtype or fp32. Accumulation is fp32 throughout; a bf16
// C is rounded once. The shapes must agree (an internal error otherwise).
void matmul(const Context& ctx, const Tensor& C, const ConstTensor& A, bool trans_a,
            const ConstTensor& B, bool trans_b, float alpha = 1.0f, float beta = 0.0f,
            const ConstTensor* bias = nullptr);

// pre = op(A) op(B) + bias and out = gelu(pre) (the tanh approximation, nn's gelu_forward), in
// one product where the device has that epilogue: cuBLASLt's GELU_AUX_BIAS on CUDA. Returns
// false, having written nothing, where it has not (the CPU; a shape without such an
// algorithm): the caller then runs the product and the GELU apart. out, pre and bias have C's
// dtype rules as in matmul.
bool matmul_gelu(const Context& ctx, const Tensor& out, const Tensor& pre, const ConstTensor& A,
                 bool trans_a, const ConstTensor& B, bool trans_b, const ConstTensor& bias);

// C = alpha op(A) B + beta C and bias_grad(N) = the column sums of B (overwritten, not added:
// unscaled by alpha), in one product where the device has that epilogue: cuBLASLt's BGRADA on
// CUDA. Returns false, having written nothing, where it has not (the CPU; a shape without such
// an algorithm). bias_grad has C's dtype.
bool matmul_bias_grad(const Context& ctx, const Tensor& C, const ConstTensor& A, bool trans_a,
                      const ConstTensor& B, float alpha, float beta, const Tensor& bias_grad);

// dpre = gelu'(pre) * (op(A) op(B)) (the derivative of the tanh approximation: nn's
// gelu_backward applied to the product) in one product where the device has that epilogue:
// cuBLASLt's DGELU on CUDA. Returns false, having written nothing, where it has not. pre has
// dpre's shape and dtype.
bool matmul_dgelu(const Context& ctx, const Tensor& dpre, const ConstTensor& A, bool trans_a,
                  const ConstTensor& B, bool trans_b, const ConstTensor& pre);

// Scratch `matmul` takes from ctx.workspace for an (M,N,K) product of `ab` operands.
size_t matmul_workspace_bytes(const Context& ctx, int64_t M, int64_t N, int64_t K, DType ab);

// This machine's GEMM rate (GFLOP/s) for products of `shape` on `ctx`'s path, on random
// operands: the best single product of at least three trials and min_seconds of them, using
// all threads.
double measure_gemm_gflops(const Context& ctx, const profile::GemmShape& shape, double min_seconds);
// The same for n x n x n products of `dtype` (fp32 or bf16) into fp32.
double measure_gemm_gflops(const Context& ctx, DType dtype, int64_t n, double min_seconds);

// The peak against which CPU MFU is reported: the best measure_gemm_gflops over sizes 256 to
// 2048 (smaller products can run faster from cache), taking about `seconds` in all.
double measure_gemm_peak(const Context& ctx, DType dtype, double seconds = 1.0);

struct GemmPeak {
  double gflops = 0;
  int rounds = 0;
  bool stable = false;  // the last two rounds agreed within the tolerance
};

// measure_gemm_peak repeated in rounds of about round_seconds until two consecutive rounds
// agree within `tolerance` (at most max_rounds): a reference that a busy start does not
// understate. The result is the best rate seen.
GemmPeak measure_gemm_peak_stable(const Context& ctx, DType dtype, double round_seconds = 0.4,
                                  int max_rounds = 6, double tolerance = 0.03);

}  // namespace trainer
