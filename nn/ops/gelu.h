// GELU, elementwise over same-shaped tensors of one dtype (fp32 or bf16), computed in fp32, in
// one of its two forms: GPT-2's tanh approximation, or the exact x Phi(x) through erf (GPT-NeoX
// and Pythia, Hugging Face's "gelu").
#pragma once

#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

enum class GeluForm : uint8_t { tanh, erf };

void gelu_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp, GeluForm form);
// dinp = dout * gelu'(inp) (overwritten; dinp may be dout, in place).
void gelu_backward(const Context& ctx, const Tensor& dinp, const ConstTensor& dout,
                   const ConstTensor& inp, GeluForm form);

}  // namespace trainer::nn
