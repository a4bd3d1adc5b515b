// The ranks as a grid of tensor-parallel and data-parallel groups (Note [Parallel grid]), the
// communicators of each, and the view a model cut for tensor parallelism has of its group.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "dist/launch.h"
#include "nn/model.h"
#include "nn/tensor_group.h"
#include "runtime/buffer.h"

namespace trainer::dist {

// Note [Parallel grid]
// Megatron-LM's order: tensor-parallel groups of `tensor` consecutive ranks (the GPUs of one
// node, which NVLink joins), data-parallel groups across them, so rank = data_rank * tensor +
// tensor_rank. A tensor group holds one model cut in `tensor` slices (nn/arch.h, Note
// [Tensor-parallel splits]) and reads the same batches; a data group holds one slice each of
// `data` replicas, and the data-parallel layer (DDP or a sharding stage) runs over it exactly as
// it runs over the world without tensor parallelism. Every rank issues the same collectives of
// both kinds in the same order; over MPI both groups share the world's queue and thread.
class Grid {
 public:
  // Splits `world` (a collective). Throws a UsageError naming the fix when `tensor` does not
  // divide the world; warns when a tensor group would span nodes (`launch`'s ranks per node).
  Grid(Communicator& world, int tensor, const LaunchInfo& launch);
  ~Grid();

  Communicator& world() { return world_; }
  // The world itself without tensor parallelism.
  Communicator& data() { return data_ ? *data_ : world_; }
  Communicator& tensor() { return *tensor_; }
  int tensor_size() const { return tensor_->size(); }
  int tensor_rank() const { return tensor_->rank(); }
  // "2 tensor x 2 data (tensor groups {0,1} {2,3})": for the log and the run's record.
  std::string describe() const;

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> data_, tensor_;
};

// A model's tensor-parallel group over a communicator: blocking collectives on the model's
// buffers, summed in `order` (every rank gets the same bits either way: MPI's and NCCL's sums
// are the same on every rank, and a fixed tree is a function of the ranks' values).
class CommTensorGroup final : public nn::TensorGroup {
 public:
  explicit CommTensorGroup(Communicator& comm, ReduceOrder order = ReduceOrder::any)
      : comm_(comm), order_(order) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_reduce(const Tensor& x) override;
  void all_gather(const Tensor& out, const ConstTensor& x) override;
  void reduce_scatter(const Tensor& out, const ConstTensor& x) override;

 private:
  Communicator& comm_;
  ReduceOrder order_;
};

// The squared norm of this rank's share of the gradient of a model cut for tensor parallelism:
// its slices of the cut parameters, and the replicated parameters (alike on every rank of the
// group) on the group's rank 0 only, so that the sum over a tensor group (and over the data
// group's shards, when sharded) counts the whole model's gradient once.
class GradNormShare {
 public:
  GradNormShare(const nn::Model& model, const DataParallel& dp, int tensor_rank);
  // Computed on the device, one sum per piece, read back once.
  double sum_squares(const Context& ctx, const ConstTensor& grads);

 private:
  std::vector<std::pair<int64_t, int64_t>> pieces_;  // (local offset, count) in dp's grads
  Buffer sums_;                                      // fp64, one per piece
};

}  // namespace trainer::dist
