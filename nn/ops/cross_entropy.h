// Softmax cross-entropy over the vocabulary, fused with the softmax: each row's max and
// log-sum-exp offset are computed once, the loss and backward read them, so the probabilities
// are never stored. Letters: N rows, V the columns at hand (the whole vocabulary, or one rank's
// slice of it under tensor parallelism), R slices. A target of -1 marks a position that is not
// counted (padding, document ends); targets were validated where the batch entered the model.
//
// Note [Vocabulary-parallel loss]
// Under tensor parallelism each rank holds the logits of its vocabulary slice [vocab_begin,
// vocab_begin + V) and never the whole row: it computes its slice's statistics, the group
// gathers them (2 floats per row per rank), cross_entropy_merge_stats combines them into the
// whole row's, and then each rank adds the loss of the targets in its slice and writes its
// slice's gradient. One process is the case of one slice with vocab_begin = 0 and no merge.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// stats(N,2) fp32 = each counted row's max and log(sum exp(x - max)) over the columns of
// logits(N,V) (fp32 or bf16); rows whose target(N) int32 is -1 are left as they are.
void cross_entropy_stats(const Context& ctx, const Tensor& stats, const ConstTensor& logits,
                         const ConstTensor& targets);

// stats(N,2) = the statistics of the union of R column slices whose own are parts(R,N,2), for
// the counted rows; the slices are combined in order (deterministic).
void cross_entropy_merge_stats(const Context& ctx, const Tensor& stats, const ConstTensor& parts,
                               const ConstTensor& targets);

// loss_sum(1) fp64 += the summed negative log-likelihood of the targets that lie in the columns
// [vocab_begin, vocab_begin + V), under the whole rows' stats(N,2). Accurate for any finite
// logits, however large: -log p = (max - logit) + offset, the difference taken in double
// (exact) and the offset, the log of a sum of values in [1, V], free of the logits' magnitude.
// Rows are summed in order (deterministic).
void cross_entropy_loss(const Context& ctx, const Tensor& loss_sum, const ConstTensor& logits,
                        const ConstTensor& stats, const ConstTensor& targets, int64_t vocab_begin);

// dlogits(N,V) = scale * (softmax(logits) - onehot(target - vocab_begin)) under the whole rows'
// stats, the onehot only where the target lies in this slice; rows with target -1 become zero.
// dlogits may be the logits tensor itself. scale (1) fp32 lies on the op's device: a value the
// device reads when the op runs, so a replayed CUDA graph takes each step's (Note [CUDA graphs]).
void cross_entropy_backward(const Context& ctx, const Tensor& dlogits, const ConstTensor& logits,
                            const ConstTensor& stats, const ConstTensor& targets,
                            const ConstTensor& scale, int64_t vocab_begin);

// Scratch cross_entropy_loss takes for N rows.
size_t cross_entropy_workspace(const Context& ctx, int64_t N);

}  // namespace trainer::nn
