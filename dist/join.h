// Uneven inputs across ranks. Before any compute each step, ranks exchange [has_data,
// loss_tokens]: the sum is the exact global token count the loss is averaged over, and the
// ranks without data are known to all. A rank without data "joins": it keeps taking part in
// every collective with zero gradients and zero tokens until every rank is done, so the result
// equals one process training on the union of the batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "runtime/enum_names.h"

namespace trainer::dist {

// join: true (idle ranks take part with zeros), false (everyone stops at the first step where
// any rank has no data), throw (a clear error on every rank at the first uneven step).
enum class JoinMode { enabled, disabled, throw_error };

inline constexpr EnumNames<JoinMode, 3> kJoinModeNames{"dist.join",
                                                       {{{JoinMode::enabled, "true"},
                                                         {JoinMode::disabled, "false"},
                                                         {JoinMode::throw_error, "throw"}}}};

struct StepCounts {
  int64_t global_tokens = 0;      // loss tokens of the global batch (the loss divisor)
  int64_t max_micro_batches = 0;  // the most micro-batches any rank has this step
  int ranks_with_data = 0;
  int world_size = 1;
  std::vector<int> ranks_without_data;  // ascending
  bool all_have_data() const { return ranks_with_data == world_size; }
  bool none_have_data() const { return ranks_with_data == 0; }
};

// One tiny collective covering all micro-batches of this rank's step: has_data, the loss
// tokens of those micro-batches (0 when !has_data) and how many there are.
StepCounts exchange_counts(Communicator& comm, bool has_data, int64_t loss_tokens,
                           int64_t micro_batches = 1);

// What this rank does in a step.
enum class StepAction {
  compute,  // forward/backward on its batch, then DDP finish, optimizer
  join,     // no batch: zero_grads, DDP finish (zeros), optimizer, like everyone else
  stop,     // every rank stops before this step (no data anywhere, or join=false)
};

class Join {
 public:
  explicit Join(JoinMode mode) : mode_(mode) {}

  // The action for `step` on this rank. Identical on every rank for stop and throw. Logs, once,
  // which rank ran out of data first and at which step. In throw mode throws trainer::Error on
  // every rank at the first uneven step.
  StepAction decide(const StepCounts& counts, bool has_data, int64_t step);

  int first_out_rank() const { return first_out_rank_; }  // -1 until a rank runs out
  int64_t first_out_step() const { return first_out_step_; }

 private:
  JoinMode mode_;
  int first_out_rank_ = -1;
  int64_t first_out_step_ = -1;
};

}  // namespace trainer::dist
