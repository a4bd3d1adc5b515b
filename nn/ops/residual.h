// Residual connection: out = a + b, n elements. Its backward is the identity on both inputs,
// so the model passes the residual stream's gradient straight to each branch (no op needed).
#pragma once

#include <cstdint>

namespace trainer::nn {

void residual_forward(float* out, const float* a, const float* b, int64_t n);

}  // namespace trainer::nn
