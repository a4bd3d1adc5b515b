// What the training loop does with NaN and infinity: a step whose loss or gradient norm is not
// finite, and a save whose weights are not (Note [Non-finite values] in nonfinite.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "app/run_setup.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "nn/model.h"

namespace trainer::app {

class NonFiniteGuard {
 public:
  struct Policy {
    NonFinite on_nonfinite = NonFinite::stop;
    int64_t max_consecutive_skips = 5, max_skips = 50;
  };
  NonFiniteGuard(dist::Communicator& comm, nn::Model& model, dist::DataParallel& dp,
                 const Policy& policy);

  // Step `step` (1-based) has a loss or gradient norm that is not finite: throws naming what is
  // not finite under stop or past skip's limits, else logs the skip. A collective.
  void bad_step(int64_t step, double loss, double grad_norm);
  // Step `step` is skipped because of `what` (a non-finite value, a spike): logs it, and throws
  // past train.max_consecutive_skips or train.max_skips.
  void skipped(int64_t step, const std::string& what);
  // A step whose update was applied: ends a streak of skips.
  void good_step() { consecutive_ = 0; }
  // Steps skipped so far by this process.
  int64_t skips() const { return total_; }
  // Whether the last step was skipped (periodic checkpoints wait for the streak to end).
  bool skipping() const { return consecutive_ > 0; }
  // Throws when the weights about to be saved at `step` are not finite; `last_saved` (-1: none)
  // is the checkpoint the message says is kept. A collective.
  void check_before_save(int64_t step, int64_t last_saved);

 private:
  int64_t first_nonfinite(const ConstTensor& flat);
  std::string culprit(double loss);

  dist::Communicator& comm_;
  nn::Model& model_;
  dist::DataParallel& dp_;
  Policy policy_;
  int64_t consecutive_ = 0, total_ = 0;  // skipped steps
};

}  // namespace trainer::app
