// The model as dist/ and app/ see it: a parameter layout over flat buffers, forward and
// backward on a batch, and two hooks. Data-parallel and sharded training, the training loop
// and checkpoints depend on this interface only, never on an architecture.
//
// Note [Asynchronous step]
// Nothing here returns a device value to the host except read_step_scalars(): forward adds
// the loss to a device-side accumulator, backward adds to the gradient buffer, and the loss
// and gradient norm come back together once per step. On a GPU the whole step can queue
// without waiting.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "nn/param_layout.h"
#include "nn/tensor_group.h"
#include "runtime/context.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// One batch as the model sees it, in host memory. Rows are B x T.
struct BatchView {
  int B = 0, T = 0;
  const int32_t* tokens = nullptr;    // (B,T)
  const int32_t* targets = nullptr;   // (B,T), -1 = not counted; null = no loss (inference)
  const int32_t* segments = nullptr;  // (B,T) or null: packed documents; positions restart
  const int32_t* lengths = nullptr;   // (B) or null: real tokens per row, the rest is padding
  // A training micro-batch's dropout key (dropout_batch_key, Note [Dropout] in nn/dropout.h),
  // or none: no dropout (evaluation, sampling, padding passes).
  std::optional<uint64_t> dropout_key{};
};

// What the parameter hook is told: a unit's parameters are about to be read for its forward
// (also when a checkpointed block's forward is rerun in backward, as part of backward) or its
// backward.
enum class ParamUse : uint8_t { forward, backward };

struct StepScalars {
  double loss_sum = 0;      // summed loss of every forward since reset_loss()
  double grad_norm_sq = 0;  // squared L2 norm of the requested gradients
};

// Note [Unit storage]
// Where a unit's weights and gradients live while the model computes. By default the model
// owns flat buffers of every parameter (ExecConfig::own_params) and fires its hooks; a sharded
// run owns the memory instead (dist/sharding.h) and hands the model each unit's weights just
// before they are read (gathered from shards) and a buffer for each unit's gradient (reduced
// to shards when complete). Calls come in the order Model::weight_schedule publishes: for the
// transformer, forward needs the embedding, blocks 0..L-1, the final unit and the embedding
// again (a tied head); backward needs the final unit and the embedding (tied), then block
// L-1..0, each followed by its gradient, and the embedding's gradient last. A pipeline stage
// (Note [Pipeline stages] in nn/transformer.cpp) reads only its units, a chunk at a time, with
// other micro-batches' forwards and backwards between: the order holds within each chunk's
// pass, and a store's prefetch by the schedule may then guess wrong (a wasted gather).
class UnitStore {
 public:
  virtual ~UnitStore() = default;
  // The unit's weights (compute dtype, the unit's elements in layout order), about to be read
  // for `use`. Valid until two further units have been asked for.
  virtual Tensor weights(int unit, ParamUse use) = 0;
  // Where backward adds the unit's gradient for this micro-batch (gradient dtype, the unit's
  // elements), zero before the micro-batch's first addition.
  virtual Tensor grads(int unit) = 0;
  // The unit's gradient for this micro-batch is complete.
  virtual void grads_ready(int unit) = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ParamLayout& layout() const = 0;
  virtual const Context& context() const = 0;
  // The units (indices into layout().units()) whose weights a pass of `use` reads, in the order
  // it reads them, each read once per pass except where listed twice (Note [Unit storage]):
  // sharding prefetches the next from this, never from the architecture.
  virtual std::vector<int> weight_schedule(ParamUse use) const = 0;
  // The dtype of the weights forward reads and of the gradients backward writes.
  virtual DType compute_dtype() const = 0;
  virtual DType grad_dtype() const = 0;
  // The fp32 master parameters (layout().total() elements), on the model's device; empty when
  // a UnitStore holds them (Note [Unit storage]).
  virtual Tensor params() = 0;
  // The gradient buffer (layout().total() elements, the gradient dtype); empty likewise.
  virtual Tensor grads() = 0;
  // The bf16 working copy of the weights that forward and backward read (layout().total()
  // elements), which the optimizer refreshes as it updates params(); empty in an fp32 model
  // and when a UnitStore holds the weights.
  virtual Tensor working_copy() = 0;
  // Refreshes the working copy from params(); call after writing params() other than through
  // the optimizer (initialisation, loading, broadcast).
  virtual void sync_working_params() = 0;

  // Runs the whole model (not a pipeline stage) on a batch, as load_batch and its one chunk's
  // forward_chunk (validated here: token ids, targets, shapes; throws a one-line
  // trainer::Error on bad input). With targets, adds the batch's summed loss to the loss
  // accumulator, keeps what backward needs and returns the number of counted targets.
  virtual int64_t forward(const BatchView& batch) = 0;
  // Every batch's token count (B x T) is a multiple of this (sequence parallelism cuts the
  // tokens into equal slices).
  virtual int tokens_multiple() const { return 1; }
  // Gradients of loss_scale * (the last forward's summed loss), added to grads(): the whole
  // model's one backward_chunk.
  virtual void backward(float loss_scale) = 0;
  virtual void zero_grads() = 0;
  virtual void reset_loss() = 0;
  // The loss accumulated since reset_loss() and the squared norm of `grads` (a gradient
  // buffer on the model's device, or empty), read back together: the step's one device
  // synchronisation (Note [Asynchronous step]).
  virtual StepScalars read_step_scalars(const ConstTensor& grads) = 0;

  // Pipeline stages (Note [Pipeline stages] in nn/transformer.cpp). A stage holds several
  // micro-batches' activations at once, one per slot (ExecConfig::activation_slots), and runs
  // its chunks of layers one at a time. Makes `slot` the one the calls below work on.
  virtual void select_slot(int slot) = 0;
  // Validates `batch` and copies it to the selected slot (every stage loads the same batch);
  // returns its counted targets.
  virtual int64_t load_batch(const BatchView& batch) = 0;
  // Chunk `chunk`'s forward on the selected slot's batch, its input in chunk_input(chunk)
  // unless it starts with the embedding; adds the loss where the chunk ends with the head.
  virtual void forward_chunk(int chunk) = 0;
  // Chunk `chunk`'s backward on the selected slot, from the loss or from the gradient of its
  // output in residual_grad(); leaves the gradient of its input there (but the embedding's).
  virtual void backward_chunk(int chunk, float loss_scale) = 0;
  // The selected slot's residual stream at the chunk's input and output, and its gradient:
  // (N, C) fp32 of the loaded batch (N / degree tokens under sequence parallelism).
  virtual Tensor chunk_input(int chunk) = 0;
  virtual Tensor chunk_output(int chunk) = 0;
  virtual Tensor residual_grad() = 0;
  // The elements of those three for `batch`, before it is loaded (a transfer's buffer is sized
  // when its receive is posted).
  virtual int64_t residual_numel(const BatchView& batch) const = 0;

  using GradsReadyHook = std::function<void(int64_t begin, int64_t end)>;
  using ParamsNeededHook = std::function<void(int unit, ParamUse use)>;

  // Backward calls `hook` each time a range [begin, end) of grads() is final for this
  // micro-batch, from the end of the flat buffer towards its start (the final unit, block
  // L-1, ..., block 0, then the embedding unit; a pipeline stage's chunk by chunk, which is why
  // DDP reduces a stage's gradients in finish()). One hook at a time: attaching over another
  // is an internal error; nullptr detaches.
  void attach_grads_ready(GradsReadyHook hook) {
    TRAINER_ASSERT(!hook || !grads_ready_, "a second grads-ready hook on one model");
    grads_ready_ = std::move(hook);
  }
  // Forward and backward call `hook` before a unit's parameters are read (see ParamUse), with
  // the unit's index in layout().units(). One at a time, likewise.
  void attach_params_needed(ParamsNeededHook hook) {
    TRAINER_ASSERT(!hook || !params_needed_, "a second params-needed hook on one model");
    params_needed_ = std::move(hook);
  }
  // Where weights and gradients come from when the model does not own them (attached before
  // the first forward of such a model; the hooks above are then not called). One at a time;
  // nullptr detaches.
  void attach_store(UnitStore* store) {
    TRAINER_ASSERT(!store || !store_, "a second unit store on one model");
    store_ = store;
  }
  // The group holding the model's other slices, which a model cut for tensor parallelism needs
  // before its first forward (of the slice's degree). One at a time; nullptr detaches.
  void attach_tensor_group(TensorGroup* group) {
    TRAINER_ASSERT(!group || !group_, "a second tensor-parallel group on one model");
    group_ = group;
  }
  TensorGroup* tensor_group() const { return group_; }

 protected:
  GradsReadyHook grads_ready_;
  ParamsNeededHook params_needed_;
  UnitStore* store_ = nullptr;
  TensorGroup* group_ = nullptr;
};

}  // namespace trainer::nn
