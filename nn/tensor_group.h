// The ranks that hold slices of one model under tensor parallelism, as the model's forward and
// backward see them (Note [Tensor-parallel splits] in nn/arch.h): the sums and gathers its cut
// products and its vocabulary-parallel loss need. dist/ implements it over a communicator; the
// model attaches one (Model::attach_tensor_group) and never sees which.
#pragma once

#include "runtime/tensor.h"

namespace trainer::nn {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // x = the sum of every rank's x, in place (contiguous, on the model's device). Every rank
  // gets the same bits.
  virtual void all_reduce(const Tensor& x) = 0;
  // out = every rank's x one after another, in rank order (x contiguous; out size() x.numel()
  // elements of x's dtype).
  virtual void all_gather(const Tensor& out, const ConstTensor& x) = 0;
  // out = the sum over ranks of their x's rank()-th part (x size() x out.numel() elements).
  virtual void reduce_scatter(const Tensor& out, const ConstTensor& x) = 0;
  // The collectives above may return once they are ordered on the model's stream, before what
  // is queued there after them, without the host waiting (GPUs); a failure of one then reaches
  // the caller here at the latest: waits for those in flight and throws the first failure.
  // The training step calls it once, before it reads the step's results.
  virtual void wait() = 0;
};

}  // namespace trainer::nn
