// How the ranks share the model's training state (Note [Sharding stages] in sharding.h):
// replicated (DDP: every rank holds everything) or sharded (ZeRO-1/2/3: each rank holds a
// slice of the optimizer state, the gradients and, under `full`, the parameters). The
// training loop, checkpoints and initialisation see only this interface: the slices of the
// flat buffer this rank holds, their fp32 masters, gradients and optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/ddp.h"
#include "nn/adamw.h"
#include "nn/model.h"
#include "runtime/enum_names.h"

namespace trainer::dist {

enum class ShardingStage : uint8_t { none, optimizer, gradients, full };

inline constexpr EnumNames<ShardingStage, 4> kShardingStageNames{
    "dist.sharding",
    {{{ShardingStage::none, "none"},
      {ShardingStage::optimizer, "optimizer"},
      {ShardingStage::gradients, "gradients"},
      {ShardingStage::full, "full"}}}};

// What a stage splits over the ranks (Note [Sharding stages]): the data-parallel layer reads
// this record, never the stage's name, so a new stage is an enum value, its name above and its
// record here.
struct StageRecord {
  bool sharded = false;          // masters and AdamW moments sliced (every stage but none)
  bool grads_by_unit = false;    // each unit's gradient reduce-scattered from a scratch slot as
                                 // its backward ends (gradients, full); else from a whole-model
                                 // gradient buffer, once per step (optimizer)
  bool weights_by_unit = false;  // each unit's weights gathered as the model reads it (full);
                                 // else every unit at once after each step
};

constexpr StageRecord stage_record(ShardingStage stage) {
  switch (stage) {
    case ShardingStage::none:
      return {};
    case ShardingStage::optimizer:
      return {.sharded = true};
    case ShardingStage::gradients:
      return {.sharded = true, .grads_by_unit = true};
    case ShardingStage::full:
      return {.sharded = true, .grads_by_unit = true, .weights_by_unit = true};
  }
  return {};
}

struct ParallelConfig {
  ShardingStage sharding = ShardingStage::none;
  double bucket_mb = 25;              // DDP bucket capacity (stage none)
  bool reshard_after_forward = true;  // full: free a unit's gathered weights after its forward
  nn::AdamWConfig adamw;
  // dist.deterministic: every micro-batch's gradients reduced at once over a fixed tree, and
  // the micro-batches' sums added in a fixed tree (Note [World-size-invariant sums]).
  bool deterministic = false;
  // Pipeline parallelism: stages none and optimizer reduce in finish(), not in a last pass
  // (a stage's micro-batches' backwards interleave with forwards and end chunk by chunk).
  bool reduce_in_finish = false;
  std::vector<Range> frozen;                          // flat ranges that are not trained
  std::function<bool(const std::string&)> is_frozen;  // the same, by parameter name
};

// Bytes of model state one rank holds, by kind (besides what the model allocates itself).
struct StateBytes {
  int64_t masters = 0, working = 0, grads = 0, optimizer = 0, buffers = 0;
  int64_t total() const { return masters + working + grads + optimizer + buffers; }
};

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual ShardingStage sharding() const = 0;

  // The slices of the model's flat buffer this rank holds (all of it when replicated), in
  // the local coordinates of masters(), grads() and optimizer().
  virtual const std::vector<nn::FlatSlice>& slices() const = 0;
  // fp32 master values of the slices (local coordinates, on the model's device).
  virtual Tensor masters() = 0;
  virtual nn::AdamW& optimizer() = 0;
  // After masters() were written (initialisation, loading): makes the weights every rank's
  // model reads agree with them (replicated: rank 0's values are broadcast).
  virtual void masters_changed() = 0;

  // Starts a step in which this rank runs `backward_passes` backward passes (its
  // micro-batches, and the empty passes collective_backward() asks for): gradients to zero.
  virtual void begin_step(int64_t backward_passes) = 0;
  // Starts the next of those passes (before its forward). Stages none and optimizer reduce
  // in the last pass only, the others in every pass (and every stage under deterministic).
  virtual void begin_micro_batch() = 0;
  // Whether every rank must run the same number of forward passes (full: each one gathers
  // the parameters) and of backward passes (gradients, full, and every stage under
  // deterministic: each reduces). A rank with fewer batches runs empty passes (Join's zeros)
  // to take part.
  virtual bool collective_forward() const = 0;
  virtual bool collective_backward() const = 0;
  // Completes the step's reduction: grads() then holds, for this rank's slices, the sum over
  // ranks, with frozen parameters' gradients zero. A rank that ran no backward takes part
  // with zeros.
  virtual void finish() = 0;
  virtual Tensor grads() = 0;
  // True when grads() is a shard: the global norm is the sum over ranks of squared norms.
  virtual bool grads_sharded() const = 0;
  // Applies the optimizer to this rank's slices and makes the new weights available to the
  // model for the next forward.
  virtual void step(float lr, float grad_scale) = 0;

  virtual StateBytes state_bytes() const = 0;
  // Seconds the last finish() blocked, and the step's collectives spent in the network.
  virtual double last_wait_seconds() const = 0;
  virtual double last_comm_seconds() const = 0;
};

// DDP (stage none) or the sharded stages. For a sharded stage `model` must have been built
// with ExecConfig::own_params = false; the result becomes its UnitStore.
std::unique_ptr<DataParallel> make_data_parallel(Communicator& comm, nn::Model& model,
                                                 const ParallelConfig& config);

// Sets the masters this rank holds a piece at a time: values(p, begin, end, out) writes
// elements [begin, end) of parameter p (0 <= begin < end <= p.numel) as fp32 to out, for the
// parts of p this rank holds; then masters_changed(). Host memory: one piece of at most 2^20
// elements, whatever the largest tensor (an embedding of V x C).
void set_masters(DataParallel& dp, const nn::Model& model,
                 const std::function<void(const nn::ParamInfo& p, int64_t begin, int64_t end,
                                          float* out)>& values);

// set_masters by the parameters' initialisation rules (a tensor's values depend only on the
// seed and its name, so every rank and shard agree).
void init_masters(DataParallel& dp, const nn::Model& model, uint64_t seed);

// One row of the model's smallest length (nn::Model::tokens_multiple) that counts nothing:
// token 0 everywhere, no target. A pass over it adds exactly zero to the loss and the
// gradients (Join's passes, and a pipeline's missing micro-batches).
struct EmptyRow {
  explicit EmptyRow(const nn::Model& model);
  // With its targets (all ignored), or without (a forward that computes no loss).
  nn::BatchView view(bool with_targets = true) const;
  std::vector<int32_t> tokens, targets;
};

// A forward (and backward, as one of the step's passes) of an EmptyRow: it issues the
// collectives of a real micro-batch, so that a rank without (enough) data takes part in the
// others' gathers and reductions (Join under sharding).
void empty_pass(nn::Model& model, DataParallel& dp, bool backward);

// The global gradient norm once finish() has run: summed exactly (deterministic: Note [Exact
// sum of squares]) or as the device sums it, over every rank's shard when sharded. A
// collective. (The training loop folds the sharded sum into its step's one small all-reduce.)
double grad_norm(Communicator& comm, DataParallel& dp, nn::Model& model, bool deterministic);

// What one rank holds of the model state under `config.sharding` on `world` ranks: what
// make_data_parallel allocates, computed without allocating (`trainer plan`). Counts the
// model's own parameter buffers under stage none.
StateBytes planned_state_bytes(const nn::ParamLayout& layout, const ParallelConfig& config,
                               int world, DType compute, DType grad);

// The same for a model of `params` parameters in general, leaving out the unit buffers and the
// padding of `full` (which depend on the model's shape): the arithmetic of the stages.
StateBytes state_bytes_for(int64_t params, const ParallelConfig& config, int world, DType compute,
                           DType grad);

}  // namespace trainer::dist
