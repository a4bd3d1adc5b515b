// Token + position embedding. Letters: N tokens (B*T), C channels, V vocab, P positions.
// Ids and positions were validated where the batch entered the model.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// out(N,C) fp32 = wte[tokens] + wpe[positions]; tokens, positions (N) int32; wte (V,C) and wpe
// (P,C) in fp32 or bf16. wpe may be empty (no learned positions). Under tensor parallelism wte
// holds the rows of ids [vocab_begin, vocab_begin + V) (a vocabulary slice), and an id outside
// them contributes zero (0 and the whole table otherwise).
void embedding_forward(const Context& ctx, const Tensor& out, const ConstTensor& tokens,
                       const ConstTensor& positions, const ConstTensor& wte, const ConstTensor& wpe,
                       int64_t vocab_begin);

// dwte[tokens - vocab_begin] += dout for the ids in wte's slice; dwpe[positions] += dout. dout
// (N,C) fp32; dwte, dwpe in the gradient dtype (dwpe may be empty). Deterministic: rows are
// summed in order.
void embedding_backward(const Context& ctx, const Tensor& dwte, const Tensor& dwpe,
                        const ConstTensor& dout, const ConstTensor& tokens,
                        const ConstTensor& positions, int64_t vocab_begin);

// Scratch embedding_backward takes for N tokens of C channels.
size_t embedding_backward_workspace(const Context& ctx, int64_t N, int64_t C);

}  // namespace trainer::nn
