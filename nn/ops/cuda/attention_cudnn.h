// Attention through cuDNN's fused flash-attention engines, composed with the backend graph API
// (runtime/cuda/cudnn_graph.h), for the cases a training step spends its time on: bf16, causal,
// with or without row lengths (padded rows: cuDNN's per-batch sequence lengths) or segments
// (packed rows: ragged sequences), training shapes (Tq == Tk > 1), head size a multiple of 8 up to
// 128, any number of key/value heads dividing the query heads. cuda/attention.cu tries it first
// (and zeroes what cuDNN leaves beyond each row's length) and runs its own kernel where these
// return false: another dtype or mask (by design), or a shape cuDNN's engines do not take or
// for which no engine configuration fits the planned workspace (each such call counted as a
// fallback, runtime/fallback.h, and its reason logged once). Forward and backward may each fall
// back alone: cuDNN's softmax statistics are the own kernel's lse (per query, log-sum-exp of the
// scaled scores, laid out (B,H,T)). Context::cudnn_attention = false turns cuDNN off (to test
// the own kernel on a GPU). Built with the CUDA backend only.
#pragma once

#include "nn/ops/attention.h"
#include "nn/ops/attention_cudnn_workspace.h"

namespace trainer::nn::cuda {

// Scratch the cuDNN path takes from ctx.workspace for up to `rows` rows (0 where it never runs:
// fp32), its plan's included (Note [cuDNN attention workspace]); a shape whose plan needs more
// runs the own kernel, counted as a fallback. `deterministic`: the backward's dQ is written by
// its own product, else accumulated (ctx.deterministic).
size_t cudnn_attention_workspace(int64_t rows, int n_head, int64_t T, int64_t head_size, DType act,
                                 bool backward, bool deterministic);

bool cudnn_attention_forward(const Context& ctx, const Tensor& out, const Tensor& lse,
                             const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                             const AttentionMask& mask, int n_head, int q_pos);

bool cudnn_attention_backward(const Context& ctx, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const ConstTensor& dout, const ConstTensor& out,
                              const ConstTensor& lse, const ConstTensor& q, const ConstTensor& k,
                              const ConstTensor& v, const AttentionMask& mask, int n_head);

// The ragged path's device helpers (in cuda/attention.cu). Token strides, in elements, of the
// tensors that carry ragged offsets, in the order of their offset tensors.
struct RaggedStrides {
  int count;
  int64_t token[kMaxRaggedTensors];
};

// lengths[i] = the length of run i of `runs` (AttentionMask::runs, R runs), 0 for R <= i <
// bucket; offsets[j][i] = the first flat index of run i (B * T for i >= R) times
// strides.token[j], for i <= bucket and j < strides.count.
void ragged_layout(const Context& ctx, int32_t* lengths, int64_t* const* offsets,
                   const ConstTensor& runs, int64_t bucket, const RaggedStrides& strides);

// lse (B, H, T) from the token-major statistics stats (B * T, H), or the other way round.
void transpose_lse(const Context& ctx, float* lse, float* stats, int64_t B, int64_t H, int64_t T,
                   bool to_token_major);

}  // namespace trainer::nn::cuda
