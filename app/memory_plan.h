// What one rank of a run allocates, from the same plans the model and the data-parallel layer
// allocate by, and whether this machine has that much (Note [Memory check]).
#pragma once

#include <cstdint>
#include <string>

#include "app/run_setup.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "nn/transformer.h"

namespace trainer::app {

inline constexpr double kMiB = 1048576.0;  // bytes in a MiB, for reports

struct MemoryPlan {
  dist::StateBytes state;         // masters, working weights, gradients, optimizer, buffers
  nn::Transformer::Memory model;  // of which activations, workspace and inputs count here
  int64_t total() const {
    return state.total() + model.activations + model.workspace + model.inputs;
  }
};

// The plan of one rank for the resolved run `rc` (its model the rank's slice under tensor
// parallelism: rc.model.tensor) in a data-parallel group of `data_ranks`.
MemoryPlan plan_memory(const RunConfig& rc, int data_ranks);

// Memory this process may still use, in bytes, and where the figure comes from: the device's
// free memory for Device::cuda; else MemAvailable, or the cgroup's limit less its usage when
// that is lower (a container, a Slurm job).
struct AvailableMemory {
  int64_t bytes = -1;  // -1: unknown
  std::string source;
};
AvailableMemory available_memory(Device device);

// A collective, before anything is allocated: refuses the start on every rank (UsageError)
// when any rank's plan, times the ranks that share its memory (`sharing`: the ranks on its
// node, or 1 per GPU), exceeds what is available there; with `warn_only` that rank warns
// instead. Every rank looks before any allocates.
void check_memory(dist::Communicator& comm, const MemoryPlan& plan, Device device, int sharing,
                  bool warn_only);

}  // namespace trainer::app
