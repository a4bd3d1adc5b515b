// The SwiGLU gate of Llama's MLP: out = silu(gate) * up, where gate and up are the two halves
// of the packed (N, 2F) output of the fused gate/up projection. Same dtype throughout (fp32
// or bf16), fp32 arithmetic.
#pragma once

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// out(N,F) = silu(gate_up[:, :F]) * gate_up[:, F:].
void swiglu_forward(const Context& ctx, const Tensor& out, const ConstTensor& gate_up);
// dgate_up(N,2F) (overwritten) from dout(N,F).
void swiglu_backward(const Context& ctx, const Tensor& dgate_up, const ConstTensor& dout,
                     const ConstTensor& gate_up);

}  // namespace trainer::nn
