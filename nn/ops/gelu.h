// GELU with GPT-2's tanh approximation, elementwise over same-shaped tensors of one dtype
// (fp32 or bf16), computed in fp32.
#pragma once

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

void gelu_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp);
// dinp = dout * gelu'(inp) (overwritten; dinp may be dout, in place).
void gelu_backward(const Context& ctx, const Tensor& dinp, const ConstTensor& dout,
                   const ConstTensor& inp);

}  // namespace trainer::nn
