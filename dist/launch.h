// Launch discovery: who this process is (rank, local rank, world size, node) from the
// environment the launcher left behind: Open MPI's mpirun, Slurm's srun, or a torchrun-style
// RANK/WORLD_SIZE/LOCAL_RANK, else a single process. A half-set or inconsistent environment is
// a clear trainer::Error at start-up, never a hang later.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace trainer::dist {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // index of this process on its node
  int local_size = 1;  // processes on this node
  int node = 0;        // node index (under mpirun: derived assuming equal processes per node)
  int nodes = 1;       // nodes the job spans (under mpirun: derived the same way)
  std::string launcher = "single";  // "mpirun", "srun", "env" (torchrun-style) or "single"

  bool distributed() const { return world_size > 1; }
};

// This machine's hostname.
std::string host_name();

// Reads one environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The launch described by `env` (the process environment by default). Throws trainer::Error
// naming the variables when they are half-set, not integers, or out of range.
LaunchInfo discover_launch(const EnvLookup& env);
LaunchInfo discover_launch();

// Selects the CUDA device local_rank for this process and returns its index; returns -1 (and
// does nothing) in a build without CUDA or on a machine without a GPU. Throws a UsageError
// (check_ranks_per_node) when the node has fewer GPUs than ranks.
int bind_device(const LaunchInfo& launch);

// Throws a UsageError naming the fix when `launch` puts more ranks on its node than the node's
// `gpus`: ranks sharing a GPU would run several times slower and may run out of memory.
void check_ranks_per_node(const LaunchInfo& launch, int gpus);

}  // namespace trainer::dist
