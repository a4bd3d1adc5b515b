// Training as a process: run_training sets the process up (stop signals, threads, the launch,
// communicators, the GPU), then runs the training loop (app/train_loop.h) and returns the exit
// code.
#pragma once

#include "app/config.h"

namespace trainer::app {

struct TrainOptions {
  // Let the start replace what the run directory holds beyond its starting point (refused
  // otherwise): an earlier run's checkpoints and metrics when starting afresh or from another
  // run's checkpoint, the later checkpoints when rewinding to an older one.
  bool force = false;
};

// The exit code of a run stopped by SIGINT, SIGTERM or SIGUSR1 (after saving a checkpoint at
// the step boundary): sysexits' EX_TEMPFAIL, "try again", so that a script or a requeue tells
// a stopped run from a finished one (0).
constexpr int kExitStopped = 75;
// The file in the run directory that says a stop signal stopped the run after its checkpoint
// (Note [Stop marker]).
constexpr const char* kStoppedMarker = "stopped";

// Trains as `config` says; returns the process exit code: 0 when it finished (its steps, or
// the end of the data), kExitStopped when a signal stopped it.
int run_training(const Config& config, const TrainOptions& options = {});

}  // namespace trainer::app
