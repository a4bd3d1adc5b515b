// Fully connected layer in Hugging Face GPT-2's Conv1D orientation: the weight is stored
// (in, out). Letters: N rows (B*T), I inputs, O outputs.
#pragma once

#include <cstdint>

namespace trainer::nn {

// out(N,O) = inp(N,I) @ w(I,O) + bias(O); bias may be null.
void linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N,
                    int I, int O);

// dinp(N,I) = dout @ w^T (overwritten; skipped when dinp is null);
// dw(I,O) += inp^T @ dout and dbias(O) += sum of dout rows (accumulated; dbias may be null).
void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int64_t N, int I, int O);

// Column sums: out(O) += sum over rows of x(N,O), deterministic.
void add_column_sums(float* out, const float* x, int64_t N, int O);

}  // namespace trainer::nn
