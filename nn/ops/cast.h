// Copies rows between tensors, converting fp32 <-> bf16 as needed (rounding to nearest even):
// the working copy of the weights, bf16 copies of fp32 gradients, KV-cache writes and exports.
#pragma once

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// dst = src, element for element: the same rows and columns, any row strides, fp32 or bf16.
void cast(const Context& ctx, const Tensor& dst, const ConstTensor& src);

}  // namespace trainer::nn
