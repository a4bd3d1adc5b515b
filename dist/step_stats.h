// Where a step's time goes on each rank, and who is slow: the figures the training loop puts
// into its metrics. Exposed communication is the time finish() blocked; the rest of the
// all-reduce time was hidden behind backward.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace trainer::dist {

struct StepTimes {
  double data_wait_s = 0;  // waiting for the loader
  double forward_s = 0;
  double backward_s = 0;
  double comm_wait_s = 0;  // exposed communication: time blocked in DDP::finish()
  double optimizer_s = 0;  // clipping and AdamW
  double comm_busy_s = 0;  // all-reduce time in the network (hidden + exposed)

  double total_s() const {
    return data_wait_s + forward_s + backward_s + comm_wait_s + optimizer_s;
  }
  // Time this rank spent on its own work, the part a slow rank makes others wait for.
  double own_work_s() const { return data_wait_s + forward_s + backward_s + optimizer_s; }
  // Fraction of all-reduce time hidden behind backward (1 when nothing was communicated).
  double hidden_fraction() const {
    return comm_busy_s > 0 ? std::max(0.0, 1.0 - comm_wait_s / comm_busy_s) : 1.0;
  }
};

// Note [Stragglers]
// A rank lags on one step when its own work exceeds the median by both `ratio` of the median
// and `floor_s` seconds: the ratio alone would call a rank 0.2 ms behind a 1 ms median a
// straggler, which is scheduler jitter, not a slow rank. It is a straggler when the same rank
// lags on `steps` steps in a row; one slow step (a page fault, a checkpoint's fsync, another
// process taking the core) is not worth a warning.
struct StragglerPolicy {
  double ratio = 0.2;
  double floor_s = 0.05;
  int steps = 5;
};

struct StragglerReport {
  std::vector<StepTimes> ranks;  // every rank's times, by rank
  int slowest_rank = 0;          // by own work
  double slowest_s = 0;
  double median_s = 0;
  double lag = 0;     // (slowest - median) / median
  bool lags = false;  // this step, by the policy's ratio and floor
};

// Gathers every rank's times (a collective) and finds the slowest rank by its own work.
StragglerReport gather_step_times(Communicator& comm, const StepTimes& mine,
                                  const StragglerPolicy& policy = {});

// Follows the reports of consecutive steps: a rank is a straggler once it has lagged on
// policy.steps steps in a row.
class StragglerWatch {
 public:
  explicit StragglerWatch(const StragglerPolicy& policy = {}) : policy_(policy) {}
  // The one-line warning when this step completes a streak of policy.steps lagging steps by
  // the same rank (and every further policy.steps steps of the same streak); else nothing.
  std::optional<std::string> observe(const StragglerReport& rep);

 private:
  StragglerPolicy policy_;
  int rank_ = -1;  // the rank of the current streak
  int streak_ = 0;
};

}  // namespace trainer::dist
