// The training loop: gradient accumulation over micro-batches, validation, checkpoints,
// exact resume, non-finite handling, metrics and graceful stop on SIGINT/SIGTERM/SIGUSR1.
#pragma once

#include "app/config.h"

namespace trainer::app {

struct TrainOptions {
  // Let the start replace what the run directory holds beyond its starting point (refused
  // otherwise): an earlier run's checkpoints and metrics when starting afresh or from another
  // run's checkpoint, the later checkpoints when rewinding to an older one.
  bool force = false;
};

// Trains as `config` says; returns the process exit code.
int run_training(const Config& config, const TrainOptions& options = {});

}  // namespace trainer::app
