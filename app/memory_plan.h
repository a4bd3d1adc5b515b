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
  int64_t loader = 0;             // the prefetched batches at most (host memory)
  // checkpoint.async: the host copy a rank that writes tensors keeps for its saves
  // (SaveSnapshot, where keeps_save_snapshot).
  int64_t checkpoint = 0;
  Device device = Device::cpu;  // the model's
  // What the model's device holds (the loader's batches apart; the checkpoint copy where the
  // device is the host).
  int64_t total() const {
    return state.total() + model.activations + model.workspace + model.inputs +
           (device == Device::cpu ? checkpoint : 0);
  }
  // The plan of a MemoryUse category (Note [Memory report]); -1 for `other`, which no plan has.
  int64_t of(MemoryUse use) const;
};

// The plan of rank `rank` for the resolved run `rc` (its model the rank's slice under tensor
// parallelism: rc.model.tensor) in a data-parallel group of `data_ranks`.
MemoryPlan plan_memory(const RunConfig& rc, int data_ranks, int rank = 0);

// Whether rank `rank` of run `rc` keeps a SaveSnapshot: checkpoint.async with periodic saves
// (the others are synchronous), on a rank that writes tensors.
bool keeps_save_snapshot(const RunConfig& rc, int data_ranks, int rank);

// Note [Memory report]: what a rank held against its plan, by category. Every byte of the
// model's, the optimizer's and the communication's state lives in Buffers, which count what
// they hold by MemoryUse (runtime/buffer.h) with each category's peak since the training
// started (Buffer::reset_peaks after start-up's GEMM measurement). The plan is what the
// model and the data-parallel layer account for (the start-up log's "memory plan per rank"):
// a Buffer of a category beyond it shows as a peak above the plan, and what no plan counts
// is `other`. The loader's batches are host vectors, counted by the loader from when one is
// made until the step takes it. The resident peak of the process adds the libraries, the
// mapped corpus pages read and the heap; on CUDA the Buffers' peak on the device leaves out
// what cuBLAS, cuDNN and NCCL allocate themselves.
// One line, "weights 12.0/12.0, ... MiB (plan/peak)", for the run's log and for bench (which
// has no loader: loader_peak -1 leaves its row out).
std::string memory_report(const MemoryPlan& plan, Device device, int64_t loader_peak);

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
// On CUDA the plan's host part (the checkpoint copy) is checked against the host's memory too,
// times `node_ranks`.
void check_memory(dist::Communicator& comm, const MemoryPlan& plan, Device device, int sharing,
                  int node_ranks, bool warn_only);

}  // namespace trainer::app
