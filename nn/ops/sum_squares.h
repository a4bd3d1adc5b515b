// The squared L2 norm of a gradient range, for clipping by the global norm.
#pragma once

#include <cstddef>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// out(1) fp64 = the sum of squares of x (fp32 or bf16), deterministic whatever the thread
// count: fixed chunks summed in order. Stays on the device (no host synchronisation).
void sum_squares(const Context& ctx, const Tensor& out, const ConstTensor& x);

// Scratch sum_squares takes.
size_t sum_squares_workspace(const Context& ctx);

}  // namespace trainer::nn
