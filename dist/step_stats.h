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
  double median_s = 0;       // the lower median (of an even count, the lesser middle one)
  double lag = 0;            // (slowest - median) / median
  bool lags = false;         // this step, by the policy's ratio and floor
  std::vector<int> lagging;  // every rank that lags this step (by the same test), by rank
};

// Gathers every rank's times (a collective) and finds the slowest rank by its own work.
StragglerReport gather_step_times(Communicator& comm, const StepTimes& mine,
                                  const StragglerPolicy& policy = {});

// Follows the reports of consecutive steps: a rank is a straggler once it has lagged on
// policy.steps steps in a row. A node is slow when every one of its ranks lags (a node's CPU
// limit, its thermal throttling, its slower GPUs): it is named as the node, with its ranks,
// instead of as whichever of them was slowest.
class StragglerWatch {
 public:
  // `hosts`: each rank's host, by rank (Communicator::hosts()).
  explicit StragglerWatch(std::vector<std::string> hosts = {}, const StragglerPolicy& policy = {})
      : hosts_(std::move(hosts)), policy_(policy) {}
  // The one-line warning when this step completes a streak of policy.steps lagging steps by
  // the same rank or node (and every further policy.steps steps of the same streak); else
  // nothing.
  std::optional<std::string> observe(const StragglerReport& rep);

 private:
  std::vector<std::string> hosts_;
  StragglerPolicy policy_;
  std::string subject_;  // the rank or node of the current streak
  int streak_ = 0;
};

}  // namespace trainer::dist
