// The training loop: gradient accumulation over micro-batches, validation, checkpoints,
// exact resume, non-finite handling, metrics and graceful stop on SIGINT/SIGTERM/SIGUSR1.
#pragma once

#include "app/config.h"

namespace trainer::app {

struct TrainOptions {
  // Start afresh in a run directory that holds an earlier run, deleting its checkpoints and
  // metrics (without it, that is refused).
  bool force = false;
};

// Trains as `config` says; returns the process exit code.
int run_training(const Config& config, const TrainOptions& options = {});

}  // namespace trainer::app
