// What one transformer block's forward and backward read: tensors resolved for the current
// batch. The Transformer resolves parameters (by role) and activations (by Act, from the plan)
// and calls the architecture's block functions (its record's, nn/architecture.h); they hold
// the order of ops, nothing else.
#pragma once

#include <array>

#include "nn/arch.h"
#include "nn/ops/attention.h"
#include "nn/tensor_group.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

struct BlockTensors {
  const ModelConfig* model = nullptr;  // the keys the block reads (heads, rotary embeddings)
  int B = 0, T = 0, n_head = 0;        // n_head: the heads of this slice
  TensorGroup* group = nullptr;        // the other slices' ranks (tensor parallelism), or null
  std::array<Tensor, size_t(Role::kCount)> w;  // working weights (compute dtype), by role
  std::array<Tensor, size_t(Role::kCount)> g;  // gradients, by role
  std::array<Tensor, size_t(Act::kCount)> a;   // activations (N, per_token), by Act
  Tensor x, out;                               // (N,C) fp32: the residual stream in and out
  Tensor tmp;                                  // (N,C) a branch's output
  Tensor d_res;                                // (N,C) fp32: d out on entry, d x on exit
  Tensor d_ln;                                 // (N,C) gradient at a norm's output
  Tensor d_branch;                             // (N,C) d_res in bf16 (bf16 models only)
  AttentionMask mask;
  // Decoding: keys and values of positions [0, q_pos + T) of one sequence, (P, Ckv) each;
  // this batch's keys and values are written at q_pos. Empty when training.
  Tensor k_cache, v_cache;
  int q_pos = 0;
  // Each token's position within its document (N, int32), for rotary embeddings.
  Tensor positions;
};

// What a forward pass computes: the whole block, the block again inside backward under full
// checkpointing (its output is not needed), or the cheap parts again under selective.
enum class BlockPass : uint8_t { train, recompute_all, recompute_cheap };

// What the block functions read tensors by (`using namespace block_access` in their files).
namespace block_access {
inline const Tensor& A(const BlockTensors& t, Act a) {
  return t.a[size_t(a)];
}
inline const Tensor& W(const BlockTensors& t, Role r) {
  return t.w[size_t(r)];
}
inline const Tensor& G(const BlockTensors& t, Role r) {
  return t.g[size_t(r)];
}
// The gradient the branches receive: d_res itself, or its bf16 copy in a bf16 model (made
// here, once per branch).
const Tensor& branch_grad(const Context& ctx, const BlockTensors& t);
// Tensor parallelism (Note [Tensor-parallel splits]); nothing without it. A row-parallel
// product's output x (the attention projection's, the MLP's second): each rank's is a partial
// sum, summed over the group here.
void sum_partial_outputs(const BlockTensors& t, const Tensor& x);
// The input gradient dx of a column-parallel product (q/k/v, the MLP's first): each rank's is
// its heads' or hidden units' part, summed over the group here before the norm's backward.
void sum_partial_input_grads(const BlockTensors& t, const Tensor& dx);
// A row-parallel product's bias: added on the group's rank 0 only (the sum would add every
// rank's); its gradient is every rank's alike.
Tensor row_parallel_bias(const BlockTensors& t, Role bias);
// The queries (B,T,C), keys and values (B,T,Ckv) of a packed (N, C + 2 Ckv) tensor (the qkv
// product, or its gradient): strided views, in that order.
std::array<Tensor, 3> qkv_parts(const BlockTensors& t, const Tensor& packed);
// Attention of the batch's queries q (B,T,C) into atty and att_lse: over its keys and values k,
// v (B,T,Ckv), or, when decoding, over the KV cache after appending k and v at q_pos.
void attend(const Context& ctx, const BlockTensors& t, const ConstTensor& q, const ConstTensor& k,
            const ConstTensor& v);
// attend's backward in training: d = (dq, dk, dv), overwritten, from d_atty and what attend
// read, qkv = (q, k, v).
void attend_backward(const Context& ctx, const BlockTensors& t, const std::array<Tensor, 3>& d,
                     const std::array<Tensor, 3>& qkv);
}  // namespace block_access

}  // namespace trainer::nn
