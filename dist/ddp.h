// Data-parallel gradient synchronisation: the flat gradient buffer is cut into buckets in the
// order backward finishes them (from the end of the buffer towards its start). Each bucket's
// sum all-reduce starts on the communication thread as soon as backward's grads-ready hook
// has covered it, while earlier blocks still compute; finish() waits only for what is still in
// flight. Gradients are summed, not averaged: the caller scales the loss by 1 / (global token
// count) from exchange_counts (join.h), so the sum is the exact global mean's gradient.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "nn/model.h"

namespace trainer::dist {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

struct DdpConfig {
  double bucket_mb = 25;      // bucket capacity in MiB of gradients (in their dtype)
  std::vector<Range> frozen;  // parameter ranges that are not trained, never communicated
  ReduceOrder order = ReduceOrder::any;  // fixed_tree under dist.deterministic
};

// The buckets for a buffer of `total` elements: contiguous ranges of at most bucket_elems,
// skipping `frozen`, ordered from the end of the buffer towards its start (backward's order).
std::vector<Range> plan_buckets(int64_t total, int64_t bucket_elems,
                                const std::vector<Range>& frozen);

class DDP {
 public:
  // Attaches to the model's grads-ready hook (Model::attach_grads_ready); detaches on
  // destruction.
  DDP(Communicator& comm, nn::Model& model, const DdpConfig& config = {});
  ~DDP();
  DDP(const DDP&) = delete;
  DDP& operator=(const DDP&) = delete;

  // Whether the next backward communicates: false on every accumulation micro-batch but the
  // last (no_sync). finish() communicates regardless.
  void set_sync(bool sync) { sync_ = sync; }

  // Completes the step's synchronisation: starts every bucket backward did not start (all of
  // them on a rank that ran no backward, e.g. a joined rank with zero gradients) and waits for
  // all. Afterwards grads() holds the sum over ranks. Throws on a failed collective.
  void finish();

  const std::vector<Range>& buckets() const { return buckets_; }
  // Seconds the last finish() blocked (communication not hidden behind backward).
  double last_wait_seconds() const { return last_wait_s_; }
  // Seconds the last step's bucket all-reduces spent in the network, summed.
  double last_comm_seconds() const { return last_comm_s_; }
  // Buckets whose all-reduce the last step started during backward.
  int last_overlapped_buckets() const { return last_overlapped_; }

 private:
  void on_ready(int64_t begin, int64_t end);
  void launch_ready();

  Communicator& comm_;
  nn::Model& model_;
  std::vector<Range> buckets_;
  ReduceOrder order_;
  // Whether there is anything to reduce: several ranks, or NCCL on one (dist.backend: nccl,
  // which runs the collectives for real to measure them on a single GPU).
  bool active_;
  std::vector<Work> inflight_;
  size_t next_bucket_ = 0;  // first bucket not yet started
  int64_t ready_from_ = 0;  // grads[ready_from_, total) are final for this step
  bool sync_ = true;
  double last_wait_s_ = 0, last_comm_s_ = 0;
  int last_overlapped_ = 0;
};

}  // namespace trainer::dist
