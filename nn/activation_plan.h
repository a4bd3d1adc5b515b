// Where every activation of one forward/backward lives: byte offsets into one buffer, planned
// from (model, exec) before the first step, so that the step allocates nothing and `trainer
// plan` reports exactly what is allocated. See Note [Activation memory].
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "nn/arch.h"
#include "nn/model_config.h"
#include "runtime/dtype.h"

namespace trainer::nn {

// Note [Activation memory]
// Kept across forward and backward: the residual stream at each block's input and at the
// end (fp32), the block activations the checkpointing policy keeps, the final norm's output
// and statistics, the loss statistics. Backward's residual-stream gradient and the gradient at
// the final norm's output live beside them. One region is shared in time: the logits (live
// from the head's forward to its backward) overlap every block's scratch (the activations the
// policy drops, recomputed into one shared copy, and backward's per-block temporaries, live
// only inside one block's forward or backward), so checkpointing shrinks memory to the
// residual stream plus the larger of the logits and one block's working set. The plan's first
// slot_bytes() are what one micro-batch keeps from its forward to its backward; a pipeline
// stage holding several (ExecConfig::activation_slots) has that part once per micro-batch and
// the rest, one pass's scratch and gradients, once (the logits then join the kept part, as
// other micro-batches' passes run between a head's forward and its backward).

struct ActSlot {
  int64_t offset = -1;  // bytes from the buffer's start
  DType dtype = DType::f32;
  int64_t per_token = 0;  // elements per token
  bool sliced = false;    // 1/degree of the tokens (sequence parallelism), else all of them
};

class ActivationPlan {
 public:
  ActivationPlan(const ModelConfig& model, const ExecConfig& exec);

  int64_t bytes() const { return bytes_; }  // with one micro-batch's kept part
  // The kept part: activations at offsets below it are one micro-batch's.
  int64_t slot_bytes() const { return slot_bytes_; }
  // Bytes for `slots` micro-batches held at once.
  int64_t bytes_for(int slots) const { return bytes_ + (slots - 1) * slot_bytes_; }
  int64_t capacity() const { return capacity_; }  // tokens
  // Block l's activation `a`: its own slot when the policy keeps it, else the shared one.
  const ActSlot& block(int layer, Act a) const;
  bool kept(int layer, Act a) const;
  // The residual stream (fp32, (N, C)) at the i-th of its points in order: each chunk's
  // blocks' inputs and the chunk's output (for a whole model, block i's input, i == L the end).
  const ActSlot& residual(int i) const { return residual_[size_t(i)]; }
  // At block l's input and output (l a layer this model holds).
  const ActSlot& input(int layer) const { return residual_[size_t(residual_at_[size_t(layer)])]; }
  const ActSlot& output(int layer) const {
    return residual_[size_t(residual_at_[size_t(layer)] + 1)];
  }

  ActSlot lnf, lnf_mean, lnf_rstd;  // final norm (N,C) (N) (N)
  ActSlot ce_stats;                 // (N,2) fp32: per-row max and log-sum-exp offset
  ActSlot ce_parts;                 // (R,N,2) fp32: each vocabulary slice's (R ranks > 1 only)
  ActSlot d_res;                    // (N,C) fp32: gradient of the residual stream
  ActSlot d_ln;                     // (N,C): gradient at a norm's output
  ActSlot logits;                   // (N,V), shared in time with the scratch below
  ActSlot tmp;                      // (N,C): a branch's output before the residual add
  ActSlot d_branch;  // (N,C): d_res in the compute dtype (bf16), or through a dropout
  // Sequence parallelism only: all N tokens of a sliced tensor, gathered (compute dtype), and
  // a product's partial sums before they are scattered (N,C in fp32 bytes, viewed in either).
  ActSlot gathered, partial;

  // Bytes kept per block for block l (0 under full, or not held) and of the time-shared region.
  int64_t kept_bytes(int layer) const { return kept_bytes_[size_t(layer)]; }
  int64_t shared_bytes() const { return shared_bytes_; }

 private:
  using BlockSlots = std::array<ActSlot, size_t(Act::kCount)>;
  std::vector<ActSlot> residual_;
  std::vector<int> residual_at_;  // by layer: the index of its input in residual_ (-1: not held)
  std::vector<int> local_;        // by layer: its index in blocks_ (-1: not held)
  std::vector<BlockSlots> blocks_;
  BlockSlots shared_;
  std::vector<Recompute> policy_;
  std::vector<ActKind> kind_;  // by Act
  std::vector<int64_t> kept_bytes_;
  int64_t capacity_ = 0, bytes_ = 0, shared_bytes_ = 0, slot_bytes_ = 0;
};

}  // namespace trainer::nn
