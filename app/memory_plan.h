// What one rank of a run allocates, from the same plans the model and the data-parallel layer
// allocate by, and whether this machine has that much (Note [Memory check]).
#pragma once

#include <cstdint>
#include <string>

#include "app/run_setup.h"
#include "dist/data_parallel.h"
#include "nn/transformer.h"

namespace trainer::app {

struct MemoryPlan {
  dist::StateBytes state;         // masters, working weights, gradients, optimizer, buffers
  nn::Transformer::Memory model;  // of which activations, workspace and inputs count here
  int64_t total() const {
    return state.total() + model.activations + model.workspace + model.inputs;
  }
};

// The plan of one rank of `world` for the resolved run `rc`.
MemoryPlan plan_memory(const RunConfig& rc, int world);

// Memory this process may still use, in bytes, and where the figure comes from: the device's
// free memory for Device::cuda; else MemAvailable, or the cgroup's limit less its usage when
// that is lower (a container, a Slurm job).
struct AvailableMemory {
  int64_t bytes = -1;  // -1: unknown
  std::string source;
};
AvailableMemory available_memory(Device device);

// Why a run whose plan, times the ranks that share the memory (`sharing`: the ranks on this
// node, or 1 per GPU), exceeds what is available must not start; "" when it fits, or when
// `warn_only` (after a warning). The caller refuses the start before anything is allocated.
std::string memory_refusal(const MemoryPlan& plan, Device device, int sharing, bool warn_only);

}  // namespace trainer::app
