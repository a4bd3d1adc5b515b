// Fully connected layer with its weight stored (in, out), as Hugging Face GPT-2's Conv1D does,
// or (out, in), as torch.nn.Linear (and so Hugging Face Llama) does. Letters: N rows, I
// inputs, O outputs. Activations and weights share one dtype (fp32 or bf16); weight gradients
// have the gradient dtype; accumulation is fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nn/ops/gelu.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

enum class WeightLayout : uint8_t { in_out, out_in };

// out(N,O) = inp(N,I) @ w + bias(O), w being (I,O), or (O,I) used transposed; bias may be
// empty.
void linear_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp,
                    const ConstTensor& w, const ConstTensor& bias,
                    WeightLayout layout = WeightLayout::in_out);

// pre(N,O) = inp @ w + bias and out(N,O) = gelu(pre): the MLP's first layer and its GELU,
// fused into the product's epilogue on CUDA for the tanh form (cuBLASLt's GELU_AUX_BIAS, which
// writes both), a product then gelu_forward otherwise (or where cuBLASLt has no such
// algorithm).
void linear_gelu_forward(const Context& ctx, const Tensor& out, const Tensor& pre,
                         const ConstTensor& inp, const ConstTensor& w, const ConstTensor& bias,
                         GeluForm form, WeightLayout layout = WeightLayout::in_out);

// dinp(N,I) = dout @ w^T (overwritten; skipped when dinp is empty); dw += inp^T @ dout (in
// w's layout; skipped when empty: a frozen weight); dbias(O) += the column sums of dout
// (skipped when empty; deterministic).
void linear_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                     const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                     WeightLayout layout = WeightLayout::in_out);

// linear_backward of a layer whose input was gelu(pre) (the MLP's second layer), GELU's backward
// included: dpre(N,I) = gelu'(pre) * (dout @ w^T), overwritten, in place of dinp; dw and dbias
// as linear_backward. On CUDA the tanh form's derivative rides in the product's epilogue
// (cuBLASLt's DGELU); otherwise (or where cuBLASLt has no such algorithm) the product goes to
// dpre and gelu_backward follows in place.
void gelu_linear_backward(const Context& ctx, const Tensor& dpre, const Tensor& dw,
                          const Tensor& dbias, const ConstTensor& dout, const ConstTensor& inp,
                          const ConstTensor& w, const ConstTensor& pre, GeluForm form,
                          WeightLayout layout = WeightLayout::in_out);

// Scratch linear_forward and linear_backward take for these sizes and dtypes.
size_t linear_workspace(const Context& ctx, int64_t N, int64_t I, int64_t O, DType act);

// The products go through matmul (runtime/gemm.h) on any device: the backends' kernels are
// only the bias gradient, dbias(O) += the column sums of dout(N,O), in an order fixed by N alone
// (not by the threads), where the
// product's epilogue does not compute it (cuBLASLt's BGRADA, with the weight gradient's
// product).
void linear_bias_grad(const Context& ctx, const Tensor& dbias, const ConstTensor& dout);
size_t linear_bias_grad_workspace(const Context& ctx, int64_t O);

}  // namespace trainer::nn
