#include "app/memory_plan.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/ranges.h>

#include "app/checkpoint_save.h"
#include "app/metrics.h"
#include "runtime/buffer.h"
#include "runtime/cuda/memory.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::app {

bool keeps_save_snapshot(const RunConfig& rc, int data_ranks, int rank) {
  return rc.checkpoint_async && rc.checkpoint_every > 0 &&
         writes_checkpoint_tensors(rank, {rc.tensor_parallel, rc.pipeline_parallel, data_ranks},
                                   rc.sharding);
}

MemoryPlan plan_memory(const RunConfig& rc, int data_ranks, int rank) {
  const nn::ParamLayout layout(rc.model);
  dist::ParallelConfig pc;
  pc.sharding = rc.sharding;
  pc.reshard_after_forward = rc.reshard_after_forward;
  pc.is_frozen = frozen_by_name(layout, rc);
  MemoryPlan plan{dist::planned_state_bytes(layout, pc, data_ranks, rc.exec.compute, rc.exec.grad),
                  nn::Transformer::planned_memory(rc.model, rc.exec)};
  plan.device = rc.exec.device;
  if (keeps_save_snapshot(rc, data_ranks, rank))
    plan.checkpoint = SaveSnapshot::bytes_for(plan.state.masters / int64_t(sizeof(float)));
  return plan;
}

int64_t MemoryPlan::of(MemoryUse use) const {
  switch (use) {
    case MemoryUse::weights:
      return state.masters + state.working;
    case MemoryUse::gradients:
      return state.grads;
    case MemoryUse::optimizer:
      return state.optimizer;
    case MemoryUse::activations:
      return model.activations + model.inputs;
    case MemoryUse::workspace:
      return model.workspace;
    case MemoryUse::communication:
      return state.buffers;
    case MemoryUse::checkpoint:
      return checkpoint;
    default:
      return -1;
  }
}

std::string memory_report(const MemoryPlan& plan, Device device, int64_t loader_peak) {
  const MemoryUsage used = Buffer::usage(device), host = Buffer::usage(Device::cpu);
  std::vector<std::string> rows;
  auto mib = [](int64_t b) { return fmt::format("{:.1f}", double(b) / kMiB); };
  for (size_t u = 0; u < size_t(MemoryUse::kCount); ++u) {
    const int64_t planned = plan.of(MemoryUse(u));
    // A save's snapshot is host memory whatever the device.
    const int64_t peak = MemoryUse(u) == MemoryUse::checkpoint ? host.peak[u] : used.peak[u];
    rows.push_back(
        fmt::format("{} {}/{}", kMemoryUseNames[u], planned < 0 ? "-" : mib(planned), mib(peak)));
  }
  if (loader_peak >= 0)
    rows.push_back(fmt::format("loader {}/{}", mib(plan.loader), mib(loader_peak)));
  std::string line = fmt::format("memory (MiB, plan/peak): {}; ", fmt::join(rows, ", "));
  if (device == Device::cuda)
    return line + fmt::format(
                      "Buffers' peak together on the device {} MiB ({} MiB free now); host "
                      "resident peak {:.1f} MiB",
                      mib(used.peak_total), mib(int64_t(cuda_free_memory())), peak_resident_mib());
  return line + fmt::format("Buffers' peak together {} MiB; resident peak {:.1f} MiB",
                            mib(used.peak_total), peak_resident_mib());
}

namespace {

// A /proc/meminfo field in bytes, or -1.
int64_t meminfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  int64_t kib = 0;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name == field + ":") return kib * 1024;
  }
  return -1;
}

// A number in a cgroup v2 file, or -1 ("max", absent).
int64_t cgroup_number(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return -1;
  }
}

// A field of a cgroup's memory.stat, or 0.
int64_t memory_stat(const std::filesystem::path& group, const std::string& field) {
  std::ifstream in(group / "memory.stat");
  std::string name;
  int64_t value = 0;
  while (in >> name >> value)
    if (name == field) return value;
  return 0;
}

// The least room left under the memory.max of this process's cgroup (v2) and of each group
// above it (Slurm limits the job's group, not the task's), or -1 when none has a limit. Room
// is the limit less the usage, not counting inactive page cache, which the kernel reclaims.
int64_t cgroup_room() {
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    if (!line.starts_with("0::")) continue;
    const std::filesystem::path root = "/sys/fs/cgroup";
    int64_t room = -1;
    for (std::filesystem::path g = line.substr(3); !g.empty() && g != "/"; g = g.parent_path()) {
      const std::filesystem::path group = root / g.relative_path();
      const int64_t limit = cgroup_number(group / "memory.max"),
                    used = cgroup_number(group / "memory.current");
      if (limit < 0 || used < 0) continue;
      const int64_t here = limit - std::max<int64_t>(0, used - memory_stat(group, "inactive_file"));
      room = room < 0 ? here : std::min(room, here);
    }
    return room;
  }
  return -1;
}

}  // namespace

AvailableMemory available_memory(Device device) {
  if (device == Device::cuda) return {int64_t(cuda_free_memory()), "the GPU's free memory"};
  AvailableMemory a{meminfo("MemAvailable"), "MemAvailable in /proc/meminfo"};
  if (const int64_t room = cgroup_room(); room >= 0 && (a.bytes < 0 || room < a.bytes))
    a = {std::max<int64_t>(0, room), "the cgroup's memory.max less its usage"};
  return a;
}

// Note [Memory check]: a plan larger than the memory left is refused at start-up, before the
// model allocates: past it the kernel's OOM killer ends the run part-way with SIGKILL (exit
// 137) and no word. The plan counts what the trainer allocates for the run's lifetime (the
// model's state under the sharding stage, activations, workspace, batch inputs); the
// process's own libraries and the data loader's batches (MemoryPlan::loader, host memory),
// some tens of MiB, are not in it.
namespace {

// Why `per_rank` bytes of `device`'s memory (`plan`, what they are), times the `sharing` ranks
// there, must not start ("" when they fit, or when `warn_only`, after a warning); `advice`
// says what would fit.
std::string memory_refusal(int64_t per_rank, const char* plan, Device device, int sharing,
                           const char* advice, bool warn_only) {
  const AvailableMemory a = available_memory(device);
  const double need = double(per_rank) * sharing;
  if (a.bytes < 0 || need <= double(a.bytes)) return {};
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const std::string what = fmt::format(
      "{} needs {:.2f} GiB per rank ({} rank(s) sharing it: {:.2f} GiB) but {:.2f} GiB are "
      "available ({})",
      plan, double(per_rank) / kGiB, sharing, need / kGiB, double(a.bytes) / kGiB, a.source);
  if (warn_only) {
    log::warn("{}; starting anyway (train.memory_check: warn)", what);
    return {};
  }
  return fmt::format(
      "{}: the run would be killed part-way. {}, or train.memory_check: warn to start anyway", what,
      advice);
}

}  // namespace

void check_memory(dist::Communicator& comm, const MemoryPlan& plan, Device device, int sharing,
                  int node_ranks, bool warn_only) {
  std::string refusal = memory_refusal(
      plan.total(), "the memory plan", device, sharing,
      "Use a smaller data.batch_size, activation checkpointing or dist.sharding (`trainer plan` "
      "shows each)",
      warn_only);
  if (refusal.empty() && device != Device::cpu && plan.checkpoint > 0)  // host memory
    refusal =
        memory_refusal(plan.checkpoint, "checkpoint.async's host copy", Device::cpu, node_ranks,
                       "Set checkpoint.async: false, or shard the state (dist.sharding: "
                       "each rank then copies its shard)",
                       warn_only);
  const std::vector<int64_t> mine = {refusal.empty() ? 0 : 1};
  const std::vector<int64_t> refused = comm.size() > 1 ? comm.all_gather(mine) : mine;
  if (!refusal.empty()) throw UsageError(refusal);
  for (int r = 0; r < comm.size(); ++r)
    if (refused[size_t(r)])
      throw UsageError(fmt::format(
          "rank {} refused the start: its memory plan does not fit its node (its error says why)",
          r));
}

}  // namespace trainer::app
