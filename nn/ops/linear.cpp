// The linear layer on any device: its products are matmul's (oneDNN on the CPU, cuBLASLt on
// CUDA, chosen by the context), the bias (and on CUDA the MLP's GELU, its derivative and the
// bias gradient) in the product's epilogue; only the bias gradient has a kernel per backend
// (linear_bias_grad, dispatch.cpp), for where no epilogue computes it.
#include "nn/ops/linear.h"

#include <algorithm>

#include "nn/ops/gelu.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"
#include "runtime/workspace.h"

namespace trainer::nn {

void linear_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp,
                    const ConstTensor& w, const ConstTensor& bias, WeightLayout layout) {
  PROFILE_SCOPE("linear_forward", "gemm");
  matmul(ctx, out, inp, false, w, layout == WeightLayout::out_in, 1.0f, 0.0f,
         bias.empty() ? nullptr : &bias);
}

void linear_gelu_forward(const Context& ctx, const Tensor& out, const Tensor& pre,
                         const ConstTensor& inp, const ConstTensor& w, const ConstTensor& bias,
                         GeluForm form, WeightLayout layout) {
  {
    PROFILE_SCOPE("linear_gelu_forward", "gemm");
    // cuBLASLt's GELU epilogue is the tanh form.
    if (form == GeluForm::tanh &&
        matmul_gelu(ctx, out, pre, inp, false, w, layout == WeightLayout::out_in, bias))
      return;
  }
  linear_forward(ctx, pre, inp, w, bias, layout);
  gelu_forward(ctx, out, pre, form);
}

namespace {

// dw += inp^T @ dout (in w's layout) and dbias += dout's column sums (when given). Where the
// device has a bias-gradient epilogue the sums come with the product, into scratch (the epilogue
// overwrites), and are added as the column sums of that one row. The epilogue writes its sums in
// dw's dtype: fp32 gradients only, so that bf16 ones still round once per micro-batch.
void weight_grads(const Context& ctx, const Tensor& dw, const Tensor& dbias,
                  const ConstTensor& dout, const ConstTensor& inp, bool in_out) {
  if (dw.empty()) {
    if (!dbias.empty()) linear_bias_grad(ctx, dbias, dout);
    return;
  }
  if (!in_out) {
    matmul(ctx, dw, dout, true, inp, false, 1.0f, 1.0f);
    if (!dbias.empty()) linear_bias_grad(ctx, dbias, dout);
    return;
  }
  if (!dbias.empty() && dw.dtype == DType::f32) {
    Workspace::Scope scratch(ctx.workspace);
    const int64_t O = dout.cols();
    const Tensor sums = make_tensor(scratch.take<float>(O), DType::f32, {1, O}, dw.device);
    if (matmul_bias_grad(ctx, dw, inp, true, dout, 1.0f, 1.0f, sums)) {
      linear_bias_grad(ctx, dbias, sums);
      return;
    }
  }
  matmul(ctx, dw, inp, true, dout, false, 1.0f, 1.0f);
  if (!dbias.empty()) linear_bias_grad(ctx, dbias, dout);
}

}  // namespace

void linear_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                     const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                     WeightLayout layout) {
  PROFILE_SCOPE("linear_backward", "gemm");
  const bool in_out = layout == WeightLayout::in_out;
  if (!dinp.empty()) matmul(ctx, dinp, dout, false, w, in_out);
  weight_grads(ctx, dw, dbias, dout, inp, in_out);
}

void gelu_linear_backward(const Context& ctx, const Tensor& dpre, const Tensor& dw,
                          const Tensor& dbias, const ConstTensor& dout, const ConstTensor& inp,
                          const ConstTensor& w, const ConstTensor& pre, GeluForm form,
                          WeightLayout layout) {
  PROFILE_SCOPE("gelu_linear_backward", "gemm");
  const bool in_out = layout == WeightLayout::in_out;
  if (form != GeluForm::tanh || !matmul_dgelu(ctx, dpre, dout, false, w, in_out, pre)) {
    matmul(ctx, dpre, dout, false, w, in_out);
    gelu_backward(ctx, dpre, dpre, pre, form);
  }
  weight_grads(ctx, dw, dbias, dout, inp, in_out);
}

size_t linear_workspace(const Context& ctx, int64_t N, int64_t I, int64_t O, DType act) {
  // With the bias-gradient epilogue, its fp32 sums are held while the product runs, and while
  // they are added.
  const size_t sums = Workspace::bytes_for<float>(O);
  size_t most = linear_bias_grad_workspace(ctx, O) + sums;
  for (size_t b : {matmul_workspace_bytes(ctx, N, O, I, act),         // forward
                   matmul_workspace_bytes(ctx, N, I, O, act),         // dinp
                   sums + matmul_workspace_bytes(ctx, I, O, N, act),  // dw (in, out)
                   matmul_workspace_bytes(ctx, O, I, N, act)})        // dw (out, in)
    most = std::max(most, b);
  return most;
}

}  // namespace trainer::nn
