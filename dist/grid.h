// The ranks as a grid of tensor-parallel and data-parallel groups (Note [Parallel grid]), the
// communicators of each, and the view a model cut for tensor parallelism has of its group.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "dist/grid_shape.h"
#include "dist/launch.h"
#include "nn/model.h"
#include "nn/tensor_group.h"
#include "runtime/buffer.h"

namespace trainer::dist {

// Note [Parallel grid]
// Megatron-LM's order: tensor-parallel groups of `tensor` consecutive ranks (the GPUs of one
// node, which NVLink joins), then `pipeline` stages of such groups (consecutive nodes), then
// data-parallel replicas, so rank = (data_rank * pipeline + stage) * tensor + tensor_rank
// (GridShape, in dist/grid_shape.h, is the one place that formula is written). A
// tensor group holds one stage's layers cut in `tensor` slices (nn/arch.h, Note
// [Tensor-parallel splits]); a pipeline group holds one tensor rank's slice of every stage
// (Note [Pipeline stages] in nn/transformer.cpp); both read the same batches. A data group holds
// the same slice of `data` replicas, and the data-parallel layer (DDP or a sharding stage) runs
// over it exactly as it runs over the world without the other two. The ranks of a tensor or a
// data group issue the same collectives in the same order; over MPI every group shares the
// world's queue and thread, and a pipeline group's transfers never hold that queue up.
class Grid {
 public:
  // Splits `world` (a collective). Throws a UsageError naming the fix when tensor x pipeline
  // does not divide the world; warns when a tensor group would span nodes (`launch`'s ranks
  // per node).
  Grid(Communicator& world, int tensor, int pipeline, const LaunchInfo& launch);
  ~Grid();

  Communicator& world() { return world_; }
  // The world itself without tensor parallelism.
  Communicator& data() { return data_ ? *data_ : world_; }
  Communicator& tensor() { return *tensor_; }
  int tensor_size() const { return tensor_->size(); }
  int tensor_rank() const { return tensor_->rank(); }
  // The pipeline group (its rank the stage), and the first and last stages' pair that sums the
  // tied embedding's gradient (a group of one elsewhere); a group of one without pipelining.
  Communicator& pipeline() { return *pipeline_; }
  Communicator& ends() { return *ends_; }
  int pipeline_size() const { return pipeline_->size(); }
  int stage() const { return pipeline_->rank(); }
  // The groups' sizes, and where each rank sits.
  const GridShape& shape() const { return shape_; }
  // "2 tensor x 2 pipeline x 2 data (tensor groups {0,1} {2,3} ...)": the log and the record.
  std::string describe() const;

 private:
  Communicator& world_;
  GridShape shape_;
  std::unique_ptr<Communicator> data_, tensor_, pipeline_, ends_;
};

// A model's tensor-parallel group over a communicator: collectives on the model's buffers,
// summed in `order` (every rank gets the same bits either way: MPI's and NCCL's sums are the
// same on every rank, and a fixed tree is a function of the ranks' values). Each is ordered
// before what the model queues after it (Work::order_stream_after): on a GPU without the host
// waiting, which then learns of a failure at the next collective or at wait().
class CommTensorGroup final : public nn::TensorGroup {
 public:
  explicit CommTensorGroup(Communicator& comm, ReduceOrder order = ReduceOrder::any)
      : comm_(comm), order_(order) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_reduce(const Tensor& x) override;
  void all_gather(const Tensor& out, const ConstTensor& x) override;
  void reduce_scatter(const Tensor& out, const ConstTensor& x) override;
  void wait() override;

 private:
  // Orders `w` before the model's next work, and forgets the ones done (throwing a failure).
  void ordered(Work w);

  Communicator& comm_;
  ReduceOrder order_;
  std::deque<Work> in_flight_;  // ordered on the stream, in issue order, not known done
};

// The squared norm of this rank's share of the gradient of a model cut for tensor parallelism:
// its slices of the cut parameters, and the replicated parameters (alike on every rank of the
// group) on the group's rank 0 only, so that the sum over a tensor group (and over the data
// group's shards, when sharded) counts the whole model's gradient once.
class GradNormShare {
 public:
  // `skip_embedding`: leave the embedding unit out (the last pipeline stage's copy of a tied
  // embedding, whose gradient the first stage counts).
  GradNormShare(const nn::Model& model, const DataParallel& dp, int tensor_rank,
                bool skip_embedding = false);
  // Computed on the device, one sum per piece, read back once.
  double sum_squares(const Context& ctx, const ConstTensor& grads);

 private:
  std::vector<std::pair<int64_t, int64_t>> pieces_;  // (local offset, count) in dp's grads
  Buffer sums_;                                      // fp64, one per piece
};

}  // namespace trainer::dist
