// GELU with GPT-2's tanh approximation. n elements.
#pragma once

#include <cstdint>

namespace trainer::nn {

void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = dout * gelu'(inp) (overwritten).
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);

}  // namespace trainer::nn
