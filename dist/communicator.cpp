// Work handles, the single-process communicator and the factory; see communicator.h.
#include "dist/communicator.h"

#include <cstdlib>
#include <cstring>

#include "dist/work_state.h"
#include "runtime/cuda/memory.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace trainer::dist {

void Work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (!state_->error.empty()) throw CommError(state_->error);
}

void Work::order_stream_after() {
  if (state_ && state_->order_stream && !done())
    state_->order_stream();  // a failure reaches wait() later
  else
    wait();
}

bool Work::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

double Work::busy_seconds() const {
  if (!state_) return 0;
  std::lock_guard lock(state_->mu);
  return state_->busy_s;
}

void CommStats::add(std::string_view kind, double buffer_bytes, int world, double busy) {
  const double n = world, share = n > 1 ? (n - 1) / n : 0;
  busy_s += busy;
  bytes += buffer_bytes;
  if (kind == "all_reduce")
    bus_bytes += 2 * share * buffer_bytes;
  else if (kind == "reduce_scatter" || kind == "all_gather")
    bus_bytes += share * buffer_bytes;
  else if (kind == "broadcast")
    bus_bytes += buffer_bytes;
}

double CommStats::bus_gbps_since(const CommStats& before) const {
  const double t = busy_s - before.busy_s;
  return t > 0 ? (bus_bytes - before.bus_bytes) / t / 1e9 : 0;
}

std::vector<Work> Communicator::transfer_async(const std::vector<PeerTransfer>&) {
  THROW_ERROR(
      "point-to-point transfers (dist.pipeline_parallel > 1) need the MPI or NCCL "
      "communicator, not {}",
      backend());
}

std::vector<int64_t> Communicator::all_gather(const std::vector<int64_t>& mine) {
  std::vector<int64_t> all(mine.size() * size_t(size()));
  all_gather_async(mine.data(), all.data(), int64_t(mine.size()), DType::i64).wait();
  return all;
}

namespace {

Work done_work() {
  auto state = std::make_shared<WorkState>();
  state->done = true;
  return Work(std::move(state));
}

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  Work all_reduce_async(void*, int64_t, DType, ReduceOrder) override { return done_work(); }
  Work reduce_scatter_async(const void* send, void* recv, int64_t count, DType type,
                            ReduceOrder) override {
    move(recv, send, size_t(count) * dtype_size(type));
    return done_work();
  }
  Work all_gather_async(const void* send, void* recv, int64_t count, DType type) override {
    move(recv, send, size_t(count) * dtype_size(type));
    return done_work();
  }
  Work broadcast_async(void*, int64_t, int root) override {
    CHECK(root == 0, "broadcast from rank {} in a single process", root);
    return done_work();
  }
  Work barrier_async(double) override { return done_work(); }
  CommStats stats() const override { return {}; }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  std::string network() const override { return "one process"; }
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SingleProcessCommunicator>();
  }

 private:
  // Host or device buffers (a sharded model on one GPU gathers from itself).
  static void move(void* dst, const void* src, size_t bytes) {
    if (dst == src || bytes == 0) return;
    static const bool gpu = cuda_built() && cuda_device_count() > 0;
    if (gpu)
      cuda_copy(dst, src, bytes);  // any pair of host and device pointers (unified addressing)
    else
      std::memmove(dst, src, bytes);
  }

  std::vector<std::string> hosts_{host_name()};
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

#ifndef TRAINER_DIST_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int, const CommOptions&) {
  THROW_ERROR("this trainer was built without NCCL (needs the CUDA backend and nccl.h)");
}
std::string nccl_version() {
  return "none";
}
#endif

std::unique_ptr<Communicator> make_communicator(const LaunchInfo& launch,
                                                const CommOptions& options) {
  if (!launch.distributed()) return make_single_process_communicator();
  // Launch errors MPI would report at length, or not at all: named with their fix, before MPI.
  if (launch.launcher == "srun" && !std::getenv("PMIX_RANK") && !std::getenv("PMI_RANK"))
    throw UsageError(fmt::format(
        "srun started {} ranks without a process-management interface for MPI: launch with "
        "srun --mpi=pmix (Debian's Open MPI speaks only PMIx to srun)",
        launch.world_size));
  if (launch.launcher == "env")
    throw UsageError(fmt::format(
        "RANK/WORLD_SIZE say {} ranks (a torchrun-style launcher) but this trainer's ranks talk "
        "over MPI: launch with mpirun -np {} or srun --mpi=pmix -n {}",
        launch.world_size, launch.world_size, launch.world_size));
  return make_mpi_communicator(launch, options);
}

}  // namespace trainer::dist
