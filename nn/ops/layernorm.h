// LayerNorm over the last dimension. Letters: N rows (B*T), C channels.
#pragma once

#include <cstdint>

namespace trainer::nn {

// out(N,C) = (inp - mean) * rstd * w + b; saves mean(N) and rstd(N) for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int C);

// dinp += ..., dw += ..., db += ... (all accumulate).
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t N, int C);

}  // namespace trainer::nn
