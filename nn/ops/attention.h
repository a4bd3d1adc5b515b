// Causal multi-head self-attention, computed in query tiles so that no (T, T) score matrix is
// ever held: a tile keeps (tile, Tk) scores for one head at a time. Letters: B rows, Tq
// queries and Tk keys per row, C channels, H heads, hs = C / H head size.
//
// Note [Attention masks]
// Key j is visible to query i (at position q_pos + i) in row b when j <= q_pos + i and, where
// given, segments[b,j] == segments[b,i] (packed rows: no attention across documents) and
// j < lengths[b] (padded rows). Queries at padding positions (i >= lengths[b]) produce zeros
// and receive no gradient. Masks apply to training batches (Tq == Tk, q_pos == 0); a KV cache
// (q_pos > 0) is one unmasked sequence. A packed batch may also list its runs: where each row's
// segment ids form runs with no id in two of them (as the loader packs documents), the segment
// mask is exactly "attend within the run", and a kernel may treat every run as a sequence of its
// own (cuDNN's variable-length attention does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/context.h"
#include "runtime/host_device.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// Dropout on the attention probabilities (Note [Dropout masks] in nn/ops/dropout.h), training
// only: query head h (of this slice) draws its mask under attention_dropout_key(key,
// first_head + h), so that a tensor-parallel slice draws its heads' masks of the whole model;
// the probability of query i and key j in row b is counter (b Tq + i) Tk + j. The output is
// (P o M) v for the probabilities P and the mask's factors M; backward differentiates that.
struct AttentionDropout {
  float p = 0;  // 0: none
  uint64_t key = 0;
  int first_head = 0;
  TRAINER_HOST_DEVICE bool on() const { return p > 0; }
};

struct AttentionMask {
  ConstTensor segments{};  // (B, T) int32, or empty
  ConstTensor lengths{};   // (B) int32, or empty
  ConstTensor runs{};      // (R+1) int32 with segments, or empty: segment_runs of them
  AttentionDropout dropout{};
};

// The flat indices (b * T + t) where each run of equal ids in the rows of segments (B, T) starts,
// then B * T: R + 1 values for R runs (the rows' runs in order; a run never crosses a row). Empty
// when some row has an id in two separate runs (the mask is then not a set of runs).
std::vector<int32_t> segment_runs(const int32_t* segments, int B, int T);

// out(B,Tq,C) = softmax(q k^T / sqrt(hs) + mask) v per head. q (B,Tq,C), k and v (B,Tk,Ckv)
// with Ckv = Hkv * hs for Hkv key/value heads dividing H (grouped-query attention: query head
// h uses key/value head h / (H / Hkv); Ckv = C is plain multi-head attention). All may
// be strided views (of a packed qkv tensor, or of a KV cache). lse(B,H,Tq) fp32 keeps each
// query's log-sum-exp for backward. Activations fp32 or bf16 (all the same); fp32 arithmetic.
void attention_forward(const Context& ctx, const Tensor& out, const Tensor& lse,
                       const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                       const AttentionMask& mask, int n_head, int q_pos = 0);

// dq, dk, dv (strided views allowed) are overwritten with the gradients of q, k and v, from
// dout(B,T,C) and the forward's out and lse.
void attention_backward(const Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const ConstTensor& dout, const ConstTensor& out, const ConstTensor& lse,
                        const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                        const AttentionMask& mask, int n_head);

// Scratch attention_forward (or attention_backward) takes for up to `rows` rows of these sizes
// and n_head query heads.
size_t attention_workspace(const Context& ctx, int64_t rows, int n_head, int64_t Tq, int64_t Tk,
                           int64_t head_size, DType act, bool backward);

}  // namespace trainer::nn
