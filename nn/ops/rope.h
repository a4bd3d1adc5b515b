// Rotary position embeddings (RoFormer; Llama's and GPT-NeoX's rotate-half pairing): within each
// head of size hs, the first rd channels (rd = hs for Llama; a fraction of hs for GPT-NeoX,
// "partial rotary") rotate in pairs (i, i + rd/2) by the angle pos * theta^(-2i/rd); the other
// hs - rd channels pass unchanged. Letters: N tokens, H heads. Applied in place to the queries
// and keys (strided views of the packed qkv activation); positions are the tokens' positions
// within their documents.
#pragma once

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// x(N, H*hs) (fp32 or bf16, strided rows allowed) rotated in place by positions(N) (int32);
// rotary_dims (rd) is even, 2 <= rd <= hs, rd <= 1024.
void rope_forward(const Context& ctx, const Tensor& x, const ConstTensor& positions, int head_size,
                  int rotary_dims, float theta);
// dx(N, H*hs) in place: the gradient at the rotation's output becomes the gradient at its
// input (the inverse rotation).
void rope_backward(const Context& ctx, const Tensor& dx, const ConstTensor& positions,
                   int head_size, int rotary_dims, float theta);

}  // namespace trainer::nn
