// Residual connection: out = a + b over n elements, where a and out are the fp32 residual
// stream and b a branch's output (fp32 or bf16). Its backward is the identity on both inputs,
// so the model hands the residual stream's gradient to each branch (no op needed).
#pragma once

#include "runtime/context.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace trainer::nn {

void residual_forward(const Context& ctx, const Tensor& out, const ConstTensor& a,
                      const ConstTensor& b);

}  // namespace trainer::nn
