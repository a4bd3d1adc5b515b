// The training loop: gradient accumulation over micro-batches, validation, checkpoints,
// exact resume, non-finite handling, metrics and graceful stop on SIGINT/SIGTERM/SIGUSR1.
#pragma once

#include "app/config.h"

namespace trainer::app {

// Trains as `config` says; returns the process exit code.
int run_training(const Config& config);

}  // namespace trainer::app
