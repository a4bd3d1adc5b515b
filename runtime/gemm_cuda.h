// Matrix products on a CUDA device through cuBLASLt (what `matmul` calls for Device::cuda; the
// contract is matmul's in gemm.h). A CPU-only build has no such products: each call throws.
#pragma once

#include <cstddef>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer {

void cuda_matmul(const Context& ctx, const Tensor& C, const Tensor& A, bool trans_a,
                 const Tensor& B, bool trans_b, float alpha, float beta, const Tensor* bias);
// matmul_gelu on CUDA (gemm.h): false, counted as a fallback (runtime/fallback.h), when
// cuBLASLt cannot run it with the GELU_AUX epilogue (no algorithm; a pre-activation of another
// dtype or a row stride that is not a multiple of 8).
bool cuda_matmul_gelu(const Context& ctx, const Tensor& out, const Tensor& pre, const Tensor& A,
                      bool trans_a, const Tensor& B, bool trans_b, const Tensor& bias);

// matmul_bias_grad and matmul_dgelu on CUDA (gemm.h): false, counted as a fallback, when
// cuBLASLt cannot run them with that epilogue.
bool cuda_matmul_bias_grad(const Context& ctx, const Tensor& C, const Tensor& A, bool trans_a,
                           const Tensor& B, float alpha, float beta, const Tensor& bias_grad);
bool cuda_matmul_dgelu(const Context& ctx, const Tensor& dpre, const Tensor& A, bool trans_a,
                       const Tensor& B, bool trans_b, const Tensor& pre);

// The cuBLASLt workspace every product may use (taken from ctx.workspace).
constexpr size_t kCublasLtWorkspace = size_t(32) << 20;

}  // namespace trainer
