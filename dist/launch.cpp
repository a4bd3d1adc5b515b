// Launch discovery from the environment; see launch.h.
#include "dist/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "runtime/error.h"

#ifdef TRAINER_DIST_CUDA
#include <cuda_runtime.h>
#endif

namespace trainer::dist {

namespace {

// Strict integer parsing: the whole value must be a base-10 integer within int range.
int parse_int(const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  CHECK(!value.empty() && end && *end == '\0' && errno == 0 && v >= INT32_MIN && v <= INT32_MAX,
        "launch environment: {}='{}' is not an integer", name, value);
  return int(v);
}

struct Vars {
  const EnvLookup& env;
  std::optional<int> get(const std::string& name) const {
    auto v = env(name);
    if (!v) return std::nullopt;
    return parse_int(name, *v);
  }
  bool has(const std::string& name) const { return env(name).has_value(); }
};

// Both or neither of (a, b) must be set.
void require_pair(const Vars& vars, const std::string& a, const std::string& b) {
  CHECK(vars.has(a) == vars.has(b), "launch environment is half-set: {} is {} but {} is {}", a,
        vars.has(a) ? "set" : "unset", b, vars.has(b) ? "set" : "unset");
}

void validate(const LaunchInfo& l, const std::string& vars) {
  CHECK(l.world_size >= 1, "launch environment ({}): world size {} must be at least 1", vars,
        l.world_size);
  CHECK(l.rank >= 0 && l.rank < l.world_size,
        "launch environment ({}): rank {} is outside [0, {}) for world size {}", vars, l.rank,
        l.world_size, l.world_size);
  CHECK(l.local_size >= 1 && l.local_size <= l.world_size,
        "launch environment ({}): local size {} must lie in [1, world size {}]", vars, l.local_size,
        l.world_size);
  CHECK(l.local_rank >= 0 && l.local_rank < l.local_size,
        "launch environment ({}): local rank {} is outside [0, {}) for local size {}", vars,
        l.local_rank, l.local_size, l.local_size);
  CHECK(l.node >= 0 && l.node < l.nodes,
        "launch environment ({}): node {} is outside [0, {}) for {} node(s)", vars, l.node, l.nodes,
        l.nodes);
  CHECK(l.nodes <= l.world_size, "launch environment ({}): {} nodes for {} ranks", vars, l.nodes,
        l.world_size);
}

LaunchInfo from_mpirun(const Vars& v) {
  require_pair(v, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  LaunchInfo l;
  l.launcher = "mpirun";
  l.rank = *v.get("OMPI_COMM_WORLD_RANK");
  l.world_size = *v.get("OMPI_COMM_WORLD_SIZE");
  require_pair(v, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  l.local_rank = v.get("OMPI_COMM_WORLD_LOCAL_RANK").value_or(l.rank);
  l.local_size = v.get("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(l.world_size);
  // Open MPI names no node index; with the usual equal processes per node this is it.
  if (l.local_size >= 1) {
    l.node = (l.rank - l.local_rank) / l.local_size;
    l.nodes = (l.world_size + l.local_size - 1) / l.local_size;
  }
  validate(l, "OMPI_COMM_WORLD_*");
  return l;
}

LaunchInfo from_srun(const Vars& v) {
  CHECK(v.has("SLURM_STEP_NUM_TASKS") || v.has("SLURM_NTASKS"),
        "launch environment is half-set: SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS "
        "nor SLURM_NTASKS is");
  CHECK(v.has("SLURM_LOCALID"),
        "launch environment is half-set: SLURM_PROCID is set but "
        "SLURM_LOCALID is not");
  LaunchInfo l;
  l.launcher = "srun";
  l.rank = *v.get("SLURM_PROCID");
  l.world_size =
      v.has("SLURM_STEP_NUM_TASKS") ? *v.get("SLURM_STEP_NUM_TASKS") : *v.get("SLURM_NTASKS");
  l.local_rank = *v.get("SLURM_LOCALID");
  l.node = v.get("SLURM_NODEID").value_or(0);
  l.nodes = v.get("SLURM_STEP_NUM_NODES").value_or(v.get("SLURM_NNODES").value_or(l.node + 1));
  // SLURM_STEP_TASKS_PER_NODE may read "2(x3),1"; the local size only bounds local_rank here.
  l.local_size = l.world_size;
  if (auto tpn = v.env("SLURM_NTASKS_PER_NODE")) {
    char* end = nullptr;
    long n = std::strtol(tpn->c_str(), &end, 10);
    if (end && *end == '\0' && n >= 1) l.local_size = int(n);  // "2(x3)" forms are left alone
  }
  validate(l, "SLURM_*");
  return l;
}

LaunchInfo from_env(const Vars& v) {
  require_pair(v, "RANK", "WORLD_SIZE");
  CHECK(v.has("LOCAL_RANK"),
        "launch environment is half-set: RANK and WORLD_SIZE are set but LOCAL_RANK is not");
  LaunchInfo l;
  l.launcher = "env";
  l.rank = *v.get("RANK");
  l.world_size = *v.get("WORLD_SIZE");
  l.local_rank = *v.get("LOCAL_RANK");
  l.local_size = v.get("LOCAL_WORLD_SIZE").value_or(l.world_size);
  l.node =
      v.get("GROUP_RANK").value_or(l.local_size > 0 ? (l.rank - l.local_rank) / l.local_size : 0);
  if (l.local_size > 0) l.nodes = (l.world_size + l.local_size - 1) / l.local_size;
  validate(l, "RANK/WORLD_SIZE/LOCAL_RANK");
  return l;
}

}  // namespace

LaunchInfo discover_launch(const EnvLookup& env) {
  Vars v{env};
  if (v.has("OMPI_COMM_WORLD_RANK") || v.has("OMPI_COMM_WORLD_SIZE")) return from_mpirun(v);
  if (v.has("SLURM_PROCID")) return from_srun(v);
  if (v.has("RANK") || v.has("WORLD_SIZE") || v.has("LOCAL_RANK")) {
    CHECK(v.has("RANK") && v.has("WORLD_SIZE"),
          "launch environment is half-set: RANK is {}, WORLD_SIZE is {}, LOCAL_RANK is {}",
          v.has("RANK") ? "set" : "unset", v.has("WORLD_SIZE") ? "set" : "unset",
          v.has("LOCAL_RANK") ? "set" : "unset");
    return from_env(v);
  }
  return LaunchInfo{};
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

LaunchInfo discover_launch() {
  return discover_launch([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  });
}

void check_ranks_per_node(const LaunchInfo& launch, int gpus) {
  if (launch.local_size <= gpus) return;
  throw UsageError(fmt::format(
      "{} ranks run on node {} but it has {} GPU(s): start at most {} rank(s) per node "
      "(mpirun --map-by ppr:{}:node, srun --ntasks-per-node={}, sbatch --gpus-per-node)",
      launch.local_size, launch.node, gpus, gpus, gpus, gpus));
}

int bind_device(const LaunchInfo& launch) {
#ifdef TRAINER_DIST_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return -1;
  }
  check_ranks_per_node(launch, count);
  const int device = launch.local_rank;
  cudaError_t err = cudaSetDevice(device);
  CHECK(err == cudaSuccess, "cudaSetDevice({}) for local rank {} failed: {}", device,
        launch.local_rank, cudaGetErrorString(err));
  return device;
#else
  (void)launch;
  return -1;
#endif
}

}  // namespace trainer::dist
