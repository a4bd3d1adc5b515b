// What one transformer block's forward and backward read: tensors resolved for the current
// batch. The Transformer resolves parameters (by role) and activations (by Act, from the plan)
// and calls the architecture's block functions (its record's, nn/architecture.h); they hold
// the order of ops, nothing else.
#pragma once

#include <array>
#include <functional>
#include <vector>

#include "nn/arch.h"
#include "nn/ops/attention.h"
#include "nn/ops/dropout.h"
#include "nn/ops/linear.h"
#include "nn/tensor_group.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// Note [Sequence parallelism]
// With tensor parallelism alone every rank of a group holds the whole residual stream and runs
// the norms and residual adds on all N tokens, the same work on every rank. Under sequence
// parallelism (Megatron-LM's) those regions hold N/degree consecutive tokens each: the
// residual stream, the norms' outputs and statistics, the branch outputs and their gradients
// (`sliced` activation slots). A column-parallel product's input is gathered from the slices
// first and a row-parallel product's partial output is reduce-scattered into them
// (block_access::product_forward), so the forward all-reduce becomes an all-gather and a
// reduce-scatter of the same bytes; backward mirrors it (branch_grad gathers the output
// gradient, product_backward scatters a column product's input gradient), and a column
// product's weight gradient gathers its input again rather than keep it whole. The norms'
// weight gradients are then partial sums over the slices, summed over the group with the
// unit's backward (Transformer).

// A block's two residual branches.
enum class Branch : uint8_t { attention, mlp };

struct BlockTensors {
  const ModelConfig* model = nullptr;  // the keys the block reads (heads, rotary embeddings)
  int B = 0, T = 0, n_head = 0;        // n_head: the heads of this slice
  TensorGroup* group = nullptr;        // the other slices' ranks (tensor parallelism), or null
  const std::vector<Matmul>* products = nullptr;   // the block's, as the spec cuts them
  const std::vector<Adapter>* adapters = nullptr;  // its LoRA adapters (nn/lora.h), or null
  // Sequence parallelism only: every token of a sliced tensor gathered (compute dtype), and a
  // row-parallel product's partial output or a column-parallel one's input gradient before
  // it is scattered (fp32 bytes), (N, C) each; empty otherwise.
  Tensor gathered, partial;
  std::array<Tensor, size_t(Role::kCount)> w;  // working weights (compute dtype), by role
  std::array<Tensor, size_t(Role::kCount)> g;  // gradients, by role
  std::array<Tensor, size_t(Act::kCount)> a;   // activations (N, per_token), by Act
  // The residual stream and what runs on it: N tokens, or N / degree of them under sequence
  // parallelism (Note [Sequence parallelism]).
  Tensor x, out;       // (N,C) fp32: the residual stream in and out
  Tensor tmp;          // (N,C) a branch's output
  Tensor d_res;        // (N,C) fp32: d out on entry, d x on exit
  Tensor d_ln;         // (N,C) gradient at a norm's output
  Tensor d_branch;     // (N,C) d_res in bf16, or through a branch's dropout (branch_grad)
  AttentionMask mask;  // with the attention probabilities' dropout (Note [Dropout])
  // Each branch's output dropout, by Branch, over the residual stream's elements here (its
  // first token's counter under sequence parallelism): off unless training with dropout.
  std::array<DropoutMask, 2> branch_drop{};
  // The LoRA adapters' input dropout: its rate and the layer's site key, from which each adapter
  // derives its own mask (nn/lora.cpp); off unless training with train.lora.dropout.
  DropoutMask adapter_drop{};
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
// The layout of Llama's and NeoX's product weights: (out, in), as Hugging Face stores them.
inline constexpr WeightLayout kOutIn = WeightLayout::out_in;
inline const Tensor& A(const BlockTensors& t, Act a) {
  return t.a[size_t(a)];
}
inline const Tensor& W(const BlockTensors& t, Role r) {
  return t.w[size_t(r)];
}
inline const Tensor& G(const BlockTensors& t, Role r) {
  return t.g[size_t(r)];
}
// A branch's output t.tmp with its dropout applied (in place; nothing without dropout), before it
// joins the residual stream.
void drop_branch(const Context& ctx, const BlockTensors& t, Branch branch);
// The gradient a branch's output product receives, every token of it: d_res itself, or its copy
// in d_branch in a bf16 model or through the branch's dropout mask (made here, once per branch),
// gathered under sequence parallelism.
Tensor branch_grad(const Context& ctx, const BlockTensors& t, Branch branch);
// Whether the two branches' gradients differ (a dropout mask on either): parallel branches
// (GPT-NeoX) then take one branch_grad each, else they share one.
inline bool branch_grads_differ(const BlockTensors& t) {
  return t.branch_drop[0].on() || t.branch_drop[1].on();
}

// Tensor parallelism applied to a product (Note [Tensor-parallel splits], Note [Sequence
// parallelism]). A block runs each of its products through these two, naming it by its weight
// (Matmul::weight); how the spec cuts that product decides what goes with it. Without a group
// they only run `op`.
// op(y, x, bias) writes the product of x into y (N rows), adding bias unless it is empty. A
// column-parallel product's x is first gathered from the token slices; a row-parallel one
// writes this rank's partial sum, which is then summed over the group into y (scattered to
// the slices), and its bias is passed on the group's rank 0 only (the sum would add every
// rank's).
using ProductForward = std::function<void(const Tensor& y, const Tensor& x, const Tensor& bias)>;
// The product's LoRA adapters (Note [LoRA] in nn/lora.h) run with it, after `op`.
void product_forward(const Context& ctx, const BlockTensors& t, Role weight, const Tensor& y,
                     const Tensor& x, const ProductForward& op);
// op(dx, dy, x) writes the gradient dx of the product's input from its output's gradient dy
// and adds its parameters' gradients (a row-parallel bias's is every rank's alike). A
// column-parallel product's x is gathered again, and it writes this rank's part of dx (its
// heads' or hidden units'), then summed over the group into dx; a row-parallel product's dy
// is branch_grad, every token already.
using ProductBackward = std::function<void(const Tensor& dx, const Tensor& dy, const Tensor& x)>;
void product_backward(const Context& ctx, const BlockTensors& t, Role weight, const Tensor& dx,
                      const Tensor& dy, const Tensor& x, const ProductBackward& op);
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
