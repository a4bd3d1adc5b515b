// Causal multi-head self-attention on a packed qkv tensor, computed in query tiles so that no
// (T, T) score matrix is ever held: a tile keeps (tile, T) scores for one head at a time.
// Letters: B rows, T row length, C channels, H heads, hs = C / H head size.
//
// Note [Attention masks]
// Key j is visible to query i in row b when j <= i and, where given, segments[b,j] ==
// segments[b,i] (packed rows: no attention across documents) and j < lengths[b] (padded rows).
// Queries at padding positions (i >= lengths[b]) produce zeros and receive no gradient.
#pragma once

#include <cstdint>

namespace trainer::nn {

struct AttentionMask {
  const int32_t* segments = nullptr;  // (B, T) or null
  const int32_t* lengths = nullptr;   // (B) or null
};

struct AttentionShape {
  int B, T, C, H;
};

// out(B,T,C) = softmax(q k^T / sqrt(hs) + mask) v per head; lse(B,H,T) keeps each query's
// log-sum-exp of scores for the backward pass.
void attention_forward(float* out, float* lse, const float* qkv, const AttentionMask& mask,
                       const AttentionShape& s);

// dqkv(B,T,3C) is overwritten with the gradient of q, k and v.
void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse,
                        const float* qkv, const AttentionMask& mask, const AttentionShape& s);

}  // namespace trainer::nn
