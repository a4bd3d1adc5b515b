// Matrix products on a CUDA device through cuBLASLt (what `matmul` calls for Device::cuda; the
// contract is matmul's in gemm.h). A CPU-only build has no such products: each call throws.
#pragma once

#include <cstddef>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer {

void cuda_matmul(const Context& ctx, const Tensor& C, const Tensor& A, bool trans_a,
                 const Tensor& B, bool trans_b, float alpha, float beta, const Tensor* bias);
// matmul_gelu on CUDA (gemm.h): false when cuBLASLt has no GELU_AUX_BIAS algorithm for it.
bool cuda_matmul_gelu(const Context& ctx, const Tensor& out, const Tensor& pre, const Tensor& A,
                      bool trans_a, const Tensor& B, bool trans_b, const Tensor& bias);

// matmul_bias_grad and matmul_dgelu on CUDA (gemm.h): false when cuBLASLt has no algorithm with
// that epilogue for it.
bool cuda_matmul_bias_grad(const Context& ctx, const Tensor& C, const Tensor& A, bool trans_a,
                           const Tensor& B, float alpha, float beta, const Tensor& bias_grad);
bool cuda_matmul_dgelu(const Context& ctx, const Tensor& dpre, const Tensor& A, bool trans_a,
                       const Tensor& B, bool trans_b, const Tensor& pre);

// The cuBLASLt workspace every product may use (taken from ctx.workspace).
constexpr size_t kCublasLtWorkspace = size_t(32) << 20;

}  // namespace trainer
