// Fully connected layer in Hugging Face GPT-2's Conv1D orientation: the weight is stored
// (in, out). Letters: N rows, I inputs, O outputs. Activations and weights share one dtype
// (fp32 or bf16); weight gradients have the gradient dtype; accumulation is fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// out(N,O) = inp(N,I) @ w(I,O) + bias(O); bias may be empty.
void linear_forward(const Context& ctx, const Tensor& out, const Tensor& inp, const Tensor& w,
                    const Tensor& bias);

// dinp(N,I) = dout @ w^T (overwritten; skipped when dinp is empty); dw(I,O) += inp^T @ dout;
// dbias(O) += the column sums of dout (skipped when empty; deterministic).
void linear_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& w);

// Scratch linear_forward and linear_backward take for these sizes and dtypes.
size_t linear_workspace(const Context& ctx, int64_t N, int64_t I, int64_t O, DType act);

namespace cpu {
void linear_forward(const Context& ctx, const Tensor& out, const Tensor& inp, const Tensor& w,
                    const Tensor& bias);
void linear_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& w);
size_t linear_workspace(const Context& ctx, int64_t N, int64_t I, int64_t O, DType act);
}  // namespace cpu

}  // namespace trainer::nn
