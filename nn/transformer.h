// The decoder-only transformer over flat buffers: parameters laid out by the architecture's
// specification (ParamLayout), activations by the checkpointing policy (ActivationPlan),
// blocks run by the architecture's block functions; or one tensor-parallel slice of it, its
// collectives over an attached TensorGroup (transformer_parallel.cpp). Owns its memory, all planned
// at construction: fp32 master parameters, their bf16 working copy (bf16 models) and gradients
// (unless a UnitStore holds them: Note [Unit storage]), activations, op workspace and the
// device-side loss and norm scalars.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "nn/activation_plan.h"
#include "nn/architecture.h"
#include "nn/dropout.h"
#include "nn/model.h"
#include "nn/model_config.h"
#include "nn/step_graphs.h"
#include "runtime/buffer.h"
#include "runtime/cuda/stream.h"
#include "runtime/workspace.h"

namespace trainer::nn {

class KvCache;

// The context a model of `exec` runs its ops in (device, stream, CPU threads, bf16 path).
Context context_for(const ExecConfig& exec);

class Transformer final : public Model {
 public:
  // Plans and allocates everything for batches of up to exec.max_rows * exec.max_seq_len tokens
  // in rows of at most exec.max_seq_len. Parameters start at zero: call init_weights or load.
  Transformer(const ModelConfig& config, const ExecConfig& exec);
  Transformer(const Transformer&) = delete;  // ctx_ points into the object
  Transformer& operator=(const Transformer&) = delete;

  // Initialises every parameter by its specification's rule; each tensor's values depend only
  // on (seed, its name). Refreshes the working copy.
  void init_weights(uint64_t seed);

  // Model.
  const ParamLayout& layout() const override { return layout_; }
  const Context& context() const override { return ctx_; }
  DType compute_dtype() const override { return exec_.compute; }
  DType grad_dtype() const override { return exec_.grad; }
  Tensor params() override;
  Tensor grads() override;
  Tensor working_copy() override;
  void sync_working_params() override;
  std::vector<int> weight_schedule(ParamUse use) const override;
  int64_t forward(const BatchView& batch) override;
  int tokens_multiple() const override { return config_.sequence_slices(); }
  void backward(float loss_scale) override;
  void zero_grads() override;
  void reset_loss() override;
  StepScalars read_step_scalars(const ConstTensor& grads) override;
  void select_slot(int slot) override;
  int64_t load_batch(const BatchView& batch) override { return copy_batch(batch, 0); }
  void forward_chunk(int chunk) override;
  void backward_chunk(int chunk, float loss_scale) override;
  Tensor chunk_input(int chunk) override;
  Tensor chunk_output(int chunk) override;
  Tensor residual_grad() override;
  int64_t residual_numel(const BatchView& batch) const override;

  const ModelConfig& config() const { return config_; }
  const ExecConfig& exec() const { return exec_; }
  const ActivationPlan& activation_plan() const { return plan_; }
  // (rows, V) logits of the last forward (compute dtype); valid until backward(), which turns
  // them into their gradient in place.
  Tensor logits() const;
  // Bytes this model allocated, by purpose.
  struct Memory {
    int64_t params, working, grads, activations, workspace, inputs;
    int64_t total() const { return params + working + grads + activations + workspace + inputs; }
  };
  Memory memory() const;
  // What a model of this config allocates, computed without allocating (`trainer plan`).
  static Memory planned_memory(const ModelConfig& config, const ExecConfig& exec);
  // Throws a UsageError when the sizes are so large that a plan's byte counts could leave
  // 64-bit integers (Note [Plan magnitude]); every plan below passes it.
  static void check_plan_magnitude(const ModelConfig& config, const ExecConfig& exec);
  // Workspace bytes the ops need, for these sizes (what the constructor allocates).
  static int64_t workspace_bytes(const ModelConfig& config, const ExecConfig& exec,
                                 const Context& ctx);

  // Decoding: runs `count` tokens of one sequence (host ids, validated) at positions
  // cache.length().. attending to every earlier position in `cache`, and appends their keys
  // and values to it; logits() then holds their (count, V) logits. The model must be sized
  // for one row of `count` tokens.
  void forward_cached(const int32_t* tokens, int count, KvCache& cache);

 private:
  // The weights forward reads (compute dtype): params() itself in an fp32 model.
  Tensor working_params();
  Tensor act(const ActSlot& slot) const;
  // The rows (tokens) `slot` holds for a B x T batch: a slice of them under sequence parallelism.
  int64_t rows(const ActSlot& slot, int B, int T) const;
  // Unit `unit`'s weights and gradients (Note [Unit storage]), and its parameter `role` in
  // either.
  Tensor unit_weights(int unit, ParamUse use);
  Tensor unit_grads(int unit);
  void unit_ready(int unit);
  Tensor param(const Tensor& unit_tensor, int unit, Role role) const;
  bool tied() const;
  Tensor head_weight(const Tensor& final_weights, ParamUse use);
  BlockTensors block_tensors(int layer, ParamUse use);
  // The micro-batch's dropout at `site` of `layer` (Note [Dropout] in nn/dropout.h) over the
  // elements of this rank's residual stream (the embeddings' output, a branch's), or off (no
  // key, or the site's rate is 0).
  DropoutMask stream_dropout(int layer, DropSite site, float p) const;
  // Validates the batch and copies it to the device; positions start at first_position.
  // Returns the number of counted targets.
  int64_t copy_batch(const BatchView& b, int first_position);
  // dst[0, count) = the host values src of `dtype`, queued on the model's stream: through `up`
  // on CUDA (upload_ or scale_upload_), between its begin() and end() (Note [Batch upload]).
  void put(PinnedUpload* up, Buffer& dst, const void* src, DType dtype, int64_t count);
  // The parts of a pass: the embedding into the first block's input, blocks [begin, end), the
  // final norm, head and loss; backward's head (from the loss into d_res) and embedding.
  void embedding_forward_pass();
  void blocks_forward(int begin, int end, KvCache* cache);
  void head_forward_pass();
  void set_loss_scale(float loss_scale);
  void head_backward_pass();
  void embedding_backward_pass();
  // The loss of the last forward's targets, added to the loss accumulator.
  void loss_forward();
  // The group of the model's other slices (tensor parallelism), or null for a whole model.
  TensorGroup* group() const;
  // Sequence parallelism (Note [Sequence parallelism] in nn/block.h): the (N, C) view of an
  // all-tokens buffer in `dtype`, and a sliced activation with every token gathered (the
  // activation itself without sequence parallelism).
  Tensor all_tokens(const ActSlot& buffer, DType dtype) const;
  Tensor gathered(const ActSlot& slice);
  // Whether each rank's gradient of a replicated parameter is only its part: a norm's under
  // sequence parallelism (its tokens'), key/value heads held whole (its queries').
  bool partial_grad(int unit, Role role) const;
  // Runs `backward` so that the partial gradients it adds to (`grads`) become the group's sums:
  // every rank but the group's first zeroes them first (the sum so far is alike on every rank),
  // and the group then sums them.
  void sum_partial_grads(const std::vector<Tensor>& grads, const std::function<void()>& backward);
  void backward_block(int layer);
  // Whether this batch's training passes may run as CUDA graphs (Note [CUDA graphs]).
  bool graphs_allowed() const;
  // Runs one unit's share of a pass (the work between two of the model's hooks): through
  // graphs_ when the pass is graphed, else at once.
  void segment(bool backward, int unit, const std::function<void()>& work);

  // One micro-batch's device state (a slot: Note [Pipeline stages]): the activations it keeps
  // (the plan's kept part: Note [Activation memory]), the device copies of its inputs, (N)
  // tokens, targets, positions, segments, (rows) lengths and (runs + 1) the segments' runs
  // (CUDA), and their shape.
  struct MicroBatchState {
    Buffer acts, tokens, targets, positions, segments, lengths, runs;
    int64_t runs_count = 0;  // runs in `runs` (0: none)
    int B = 0, T = 0;
    std::optional<uint64_t> dropout_key;  // BatchView::dropout_key, when the model has dropout
    bool has_targets = false, has_segments = false, has_lengths = false;
  };

  ModelConfig config_;
  ExecConfig exec_;
  const std::vector<std::pair<int, int>> chunks_;  // the layers held, by chunk
  const Architecture& arch_;
  ArchSpec spec_;
  ParamLayout layout_;
  ActivationPlan plan_;
  Workspace workspace_;
  Context ctx_;
  Buffer params_, working_, grads_;
  // The selected slot's micro-batch; the others' wait in slots_ (whose entry for the selected
  // one is empty meanwhile: select_slot swaps them).
  MicroBatchState mb_;
  std::vector<MicroBatchState> slots_;
  int slot_ = 0;
  Buffer scratch_;  // the activation plan past its kept part: one pass's, shared by the slots
  // The last backward's loss scale (fp32) and [loss_sum, grad_norm_sq] fp64 on the device.
  Buffer loss_scale_, scalars_;
  std::vector<int32_t> host_positions_;
  // CUDA (Note [Batch upload]): the batch's inputs, and backward's loss scale apart, so that
  // each keeps its two buffers' worth of lookahead.
  std::unique_ptr<PinnedUpload> upload_, scale_upload_;
  StepGraphs graphs_;
  bool graphed_ = false;  // the pass under way runs its segments through graphs_
};

}  // namespace trainer::nn
