// Softmax cross-entropy over the vocabulary, fused with the softmax: forward keeps each row's
// max and log-sum of exponentials, backward recomputes the probabilities from them, so the
// probabilities are never stored. Letters: N rows, V vocab. A target of -1 marks a position
// that is not counted (padding, document ends); targets were validated where the batch
// entered the model.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// loss_sum(1) fp64 += the summed negative log-likelihood of the targets(N) int32 under
// logits(N,V) (fp32 or bf16); stats(N,2) fp32 receives each counted row's max and log-sum-exp
// offset for backward. The loss stays accurate for any finite logits, however large: -log p =
// (max - logit) + log(sum exp(x - max)), the difference taken in double (exact) and the sum,
// of values in [1, V], free of the logits' magnitude. Rows are summed in order (deterministic).
void cross_entropy_forward(const Context& ctx, const Tensor& loss_sum, const Tensor& stats,
                           const ConstTensor& logits, const ConstTensor& targets);

// dlogits(N,V) = scale * (softmax(logits) - onehot(target)); rows with target -1 become zero.
// dlogits may be the logits tensor itself. scale (1) fp32 lies on the op's device: a value the
// device reads when the op runs, so a replayed CUDA graph takes each step's (Note [CUDA graphs]).
void cross_entropy_backward(const Context& ctx, const Tensor& dlogits, const ConstTensor& logits,
                            const ConstTensor& stats, const ConstTensor& targets,
                            const ConstTensor& scale);

// Scratch cross_entropy_forward takes for N rows.
size_t cross_entropy_workspace(const Context& ctx, int64_t N);

}  // namespace trainer::nn
