// The linear layer on any device: its products are matmul's (oneDNN on the CPU, cuBLASLt on
// CUDA, chosen by the context), the bias (and on CUDA the MLP's GELU) added in the product's
// epilogue; only the bias gradient has a kernel per backend (linear_bias_grad, dispatch.cpp).
#include "nn/ops/linear.h"

#include <algorithm>

#include "nn/ops/gelu.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"

namespace trainer::nn {

void linear_forward(const Context& ctx, const Tensor& out, const Tensor& inp, const Tensor& w,
                    const Tensor& bias, WeightLayout layout) {
  PROFILE_SCOPE("linear_forward");
  matmul(ctx, out, inp, false, w, layout == WeightLayout::out_in, 1.0f, 0.0f,
         bias.empty() ? nullptr : &bias);
}

void linear_gelu_forward(const Context& ctx, const Tensor& out, const Tensor& pre,
                         const Tensor& inp, const Tensor& w, const Tensor& bias,
                         WeightLayout layout) {
  {
    PROFILE_SCOPE("linear_gelu_forward");
    if (matmul_gelu(ctx, out, pre, inp, false, w, layout == WeightLayout::out_in, bias)) return;
  }
  linear_forward(ctx, pre, inp, w, bias, layout);
  gelu_forward(ctx, out, pre);
}

void linear_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& w, WeightLayout layout) {
  PROFILE_SCOPE("linear_backward");
  const bool in_out = layout == WeightLayout::in_out;
  if (!dinp.empty()) matmul(ctx, dinp, dout, false, w, in_out);
  if (in_out)
    matmul(ctx, dw, inp, true, dout, false, 1.0f, 1.0f);
  else
    matmul(ctx, dw, dout, true, inp, false, 1.0f, 1.0f);
  if (!dbias.empty()) linear_bias_grad(ctx, dbias, dout);
}

size_t linear_workspace(const Context& ctx, int64_t N, int64_t I, int64_t O, DType act) {
  size_t most = linear_bias_grad_workspace(ctx, O);
  for (size_t b : {matmul_workspace_bytes(ctx, N, O, I, act),   // forward
                   matmul_workspace_bytes(ctx, N, I, O, act),   // dinp
                   matmul_workspace_bytes(ctx, I, O, N, act),   // dw (in, out)
                   matmul_workspace_bytes(ctx, O, I, N, act)})  // dw (out, in)
    most = std::max(most, b);
  return most;
}

}  // namespace trainer::nn
