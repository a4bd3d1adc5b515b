// Rotary position embeddings (RoFormer; Llama's rotate-half pairing): within each head of size
// hs, channel pairs (i, i + hs/2) are rotated by the angle pos * theta^(-2i/hs). Letters: N
// tokens, H heads. Applied in place to the queries and keys (strided views of the packed qkv
// activation); positions are the tokens' positions within their documents.
#pragma once

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// x(N, H*hs) (fp32 or bf16, strided rows allowed) rotated in place by positions(N) (int32).
void rope_forward(const Context& ctx, const Tensor& x, const Tensor& positions, int head_size,
                  float theta);
// dx(N, H*hs) in place: the gradient at the rotation's output becomes the gradient at its
// input (the inverse rotation).
void rope_backward(const Context& ctx, const Tensor& dx, const Tensor& positions, int head_size,
                   float theta);

namespace cpu {
void rope_forward(const Context& ctx, const Tensor& x, const Tensor& positions, int head_size,
                  float theta);
void rope_backward(const Context& ctx, const Tensor& dx, const Tensor& positions, int head_size,
                   float theta);
}  // namespace cpu

// The CUDA kernels (<op>_cuda.cu), in builds with the CUDA backend.
namespace cuda {
void rope_forward(const Context& ctx, const Tensor& x, const Tensor& positions, int head_size,
                  float theta);
void rope_backward(const Context& ctx, const Tensor& dx, const Tensor& positions, int head_size,
                   float theta);
}  // namespace cuda

}  // namespace trainer::nn
