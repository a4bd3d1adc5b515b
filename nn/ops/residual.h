// Residual connection: out = a + b over n elements, where a and out are the fp32 residual
// stream and b a branch's output (fp32 or bf16). Its backward is the identity on both inputs,
// so the model hands the residual stream's gradient to each branch (no op needed).
#pragma once

#include "runtime/context.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace trainer::nn {

void residual_forward(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b);

namespace cpu {
void residual_forward(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b);

// out[i] = a[i] + b[i] for i < n, in fp32: the residual add, shared by residual_forward and the
// norms that fuse it (their sums are then the same bits).
template <typename B>
inline void residual_add(float* out, const float* a, const B* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + load(b[i]);
}
}  // namespace cpu

// The CUDA kernels (<op>_cuda.cu), in builds with the CUDA backend.
namespace cuda {
void residual_forward(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b);
}  // namespace cuda

}  // namespace trainer::nn
