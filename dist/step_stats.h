// Where a step's time goes on each rank, and who is slow: the figures the training loop puts
// into its metrics. Exposed communication is the time finish() blocked; the rest of the
// all-reduce time was hidden behind backward.
#pragma once

#include <algorithm>
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

struct StragglerReport {
  std::vector<StepTimes> ranks;  // every rank's times, by rank
  int slowest_rank = 0;          // by own work
  double slowest_s = 0;
  double median_s = 0;
  double lag = 0;          // (slowest - median) / median
  bool straggler = false;  // lag > threshold
  std::string message;     // one line naming the slowest rank when straggler
};

// Gathers every rank's times (a collective) and names the slowest rank when its own work lags
// the median by more than `threshold` (0.2 = 20%).
StragglerReport gather_step_times(Communicator& comm, const StepTimes& mine,
                                  double threshold = 0.2);

}  // namespace trainer::dist
