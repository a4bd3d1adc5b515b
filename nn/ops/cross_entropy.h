// Softmax cross-entropy over the vocabulary, fused with the softmax. Letters: N rows (B*T),
// V vocab. A target of -1 marks a position that is not counted (padding, document ends).
#pragma once

#include <cstdint>

namespace trainer::nn {

struct LossSum {
  double sum = 0;     // summed negative log-likelihood over counted positions
  int64_t count = 0;  // counted positions
};

// Replaces logits(N,V) by their softmax in place and returns the summed loss of the targets.
// Throws naming the position when a target lies outside [-1, V).
LossSum cross_entropy_forward(float* logits, const int32_t* targets, int64_t N, int V);

// Turns probs(N,V) (from forward) into dlogits = scale * (probs - onehot(target)) in place;
// rows with target -1 become zero.
void cross_entropy_backward(float* probs, const int32_t* targets, int64_t N, int V, float scale);

}  // namespace trainer::nn
