// Token + position embedding. Letters: B batch rows, T row length, C channels, V vocab.
#pragma once

#include <cstdint>

namespace trainer::nn {

// out(B*T, C) = wte[tokens] + wpe[positions]. Throws naming the token when an id is outside
// [0, V) or a position outside [0, P).
void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                       const float* wte, const float* wpe, int64_t N, int C, int V, int P);

// dwte[tokens] += dout; dwpe[positions] += dout (accumulating, deterministic order).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int C);

}  // namespace trainer::nn
