// One transformer block's forward and backward over tensors resolved for the current batch.
// The Transformer resolves parameters (by role) and activations (by Act, from the plan) and
// calls the architecture's block functions; they hold the order of ops, nothing else.
#pragma once

#include <array>

#include "nn/arch.h"
#include "nn/ops/attention.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

struct BlockTensors {
  int B = 0, T = 0, n_head = 0;
  std::array<Tensor, size_t(Role::kCount)> w;  // working weights (compute dtype), by role
  std::array<Tensor, size_t(Role::kCount)> g;  // gradients, by role
  std::array<Tensor, size_t(Act::kCount)> a;   // activations (N, per_token), by Act
  Tensor x, out;                               // (N,C) fp32: the residual stream in and out
  Tensor tmp;                                  // (N,C) a branch's output
  Tensor d_res;                                // (N,C) fp32: d out on entry, d x on exit
  Tensor d_ln;                                 // (N,C) gradient at a norm's output
  Tensor d_branch;                             // (N,C) d_res in bf16 (bf16 models only)
  AttentionMask mask;
  // Decoding: keys and values of positions [0, q_pos + T) of one sequence, (P, C) each;
  // this batch's keys and values are written at q_pos. Empty when training.
  Tensor k_cache, v_cache;
  int q_pos = 0;
};

// What a forward pass computes: the whole block, the block again inside backward under full
// checkpointing (its output is not needed), or the cheap parts again under selective.
enum class BlockPass : uint8_t { train, recompute_all, recompute_cheap };

void gpt2_block_forward(const Context& ctx, const BlockTensors& t, BlockPass pass);
void gpt2_block_backward(const Context& ctx, const BlockTensors& t);

}  // namespace trainer::nn
