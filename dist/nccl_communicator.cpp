// The NCCL communicator for GPU buffers: collectives are enqueued on one dedicated CUDA stream
// in issue order; a watcher thread completes each Work when its end event fires, and fails it
// (and aborts the NCCL communicator) when it does not fire within timeout_s. Host buffers (the
// small count and hash vectors) go through the bootstrap communicator instead. Built only
// when CUDA and NCCL are found (TRAINER_DIST_NCCL).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <deque>
#include <thread>

#include "dist/communicator.h"
#include "dist/work_state.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::dist {

namespace {

using Clock = std::chrono::steady_clock;

#define NCCL_CALL(call)                                                             \
  do {                                                                              \
    ncclResult_t r_ = (call);                                                       \
    CHECK(r_ == ncclSuccess || r_ == ncclInProgress, "NCCL error in {}: {}", #call, \
          ncclGetErrorString(r_));                                                  \
  } while (0)
#define CUDA_CALL(call)                                                              \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    CHECK(e_ == cudaSuccess, "CUDA error in {}: {}", #call, cudaGetErrorString(e_)); \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::f64:
      return ncclFloat64;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  return ncclUint8;
}

bool on_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device, const CommOptions& options)
      : bootstrap_(bootstrap), device_(device), options_(options) {
    CUDA_CALL(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (bootstrap_.rank() == 0) NCCL_CALL(ncclGetUniqueId(&id));
    bootstrap_.broadcast(&id, sizeof(id), 0);
    NCCL_CALL(ncclCommInitRank(&comm_, bootstrap_.size(), id, bootstrap_.rank()));
    CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CALL(cudaMalloc(&barrier_buf_, sizeof(float)));
    CUDA_CALL(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming));
    watcher_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    if (broken_) {
      if (!comm_aborted_) ncclCommAbort(comm_);
    } else {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    cudaFree(barrier_buf_);
    cudaEventDestroy(issued_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  std::string backend() const override { return "nccl"; }
  bool runs_collectives_alone() const override { return true; }

  // NCCL chooses its own algorithm (ring or tree, by size), so it has no fixed order: run setup
  // refuses dist.deterministic on CUDA, and no fixed-tree reduction reaches here.
  Work all_reduce_async(void* data, int64_t count, DType type, ReduceOrder order) override {
    if (!on_device(data)) return bootstrap_.all_reduce_async(data, count, type, order);
    TRAINER_ASSERT(order == ReduceOrder::any, "a fixed-tree reduction on NCCL");
    return launch("all_reduce", count * dtype_size(type), [&] {
      NCCL_CALL(ncclAllReduce(data, data, size_t(count), nccl_type(type), ncclSum, comm_, stream_));
    });
  }
  Work reduce_scatter_async(const void* send, void* recv, int64_t count, DType type,
                            ReduceOrder order) override {
    if (!on_device(recv)) return bootstrap_.reduce_scatter_async(send, recv, count, type, order);
    TRAINER_ASSERT(order == ReduceOrder::any, "a fixed-tree reduction on NCCL");
    return launch("reduce_scatter", count * dtype_size(type) * size(), [&] {
      NCCL_CALL(
          ncclReduceScatter(send, recv, size_t(count), nccl_type(type), ncclSum, comm_, stream_));
    });
  }
  Work all_gather_async(const void* send, void* recv, int64_t count, DType type) override {
    if (!on_device(recv)) return bootstrap_.all_gather_async(send, recv, count, type);
    return launch("all_gather", count * dtype_size(type) * size(), [&] {
      NCCL_CALL(ncclAllGather(send, recv, size_t(count), nccl_type(type), comm_, stream_));
    });
  }
  Work broadcast_async(void* data, int64_t bytes, int root) override {
    if (!on_device(data)) return bootstrap_.broadcast_async(data, bytes, root);
    return launch("broadcast", bytes, [&] {
      NCCL_CALL(ncclBroadcast(data, data, size_t(bytes), ncclUint8, root, comm_, stream_));
    });
  }
  Work barrier_async(double timeout_s) override {
    if (timeout_s > 0) return bootstrap_.barrier_async(timeout_s);  // a host-side wait
    return launch("barrier", 0, [&] {
      NCCL_CALL(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }
  CommStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  struct Pending {
    std::string name;
    const char* kind = "";
    double bytes = 0;
    cudaEvent_t start = nullptr, end = nullptr;
    Clock::time_point enqueued;
    std::shared_ptr<WorkState> state;
  };

  template <typename Fn>
  Work launch(const char* kind, double bytes, Fn&& enqueue_op) {
    auto state = std::make_shared<WorkState>();
    Pending p;
    {
      std::lock_guard lock(mu_);
      p.name = fmt::format("{} #{} (NCCL)", kind, next_seq_++);
      if (broken_) {
        state->complete(0, fmt::format("{} not run: the communicator failed earlier: {}", p.name,
                                       broken_message_));
        return Work(state);
      }
    }
    CUDA_CALL(cudaEventCreate(&p.start));
    CUDA_CALL(cudaEventCreate(&p.end));
    // The collective reads what the model's stream has queued so far (a gradient bucket).
    CUDA_CALL(cudaEventRecord(issued_, static_cast<cudaStream_t>(options_.cuda_stream)));
    CUDA_CALL(cudaStreamWaitEvent(stream_, issued_, 0));
    CUDA_CALL(cudaEventRecord(p.start, stream_));
    enqueue_op();
    CUDA_CALL(cudaEventRecord(p.end, stream_));
    p.enqueued = Clock::now();
    p.kind = kind;
    p.bytes = bytes;
    p.state = state;
    {
      std::lock_guard lock(mu_);
      pending_.push_back(std::move(p));
    }
    cv_.notify_one();
    return Work(state);
  }

  // Completes pending operations in order; fails one that outlives its deadline.
  void watch() {
    cudaSetDevice(device_);
    for (;;) {
      Pending p;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) return;
        p = std::move(pending_.front());
        pending_.pop_front();
      }
      const auto deadline = p.enqueued + std::chrono::duration<double>(options_.timeout_s);
      std::string error;
      for (;;) {
        const cudaError_t q = cudaEventQuery(p.end);
        if (q == cudaSuccess) break;
        ncclResult_t async_error = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async_error);
        if (q != cudaErrorNotReady ||
            (async_error != ncclSuccess && async_error != ncclInProgress)) {
          error = fmt::format(
              "{} failed on rank {}: {}", p.name, rank(),
              q != cudaErrorNotReady ? cudaGetErrorString(q) : ncclGetErrorString(async_error));
          break;
        }
        if (Clock::now() > deadline) {
          error = fmt::format(
              "{} timed out after {:.1f} s on rank {}: some rank did not arrive (NCCL cannot "
              "say which)",
              p.name, options_.timeout_s, rank());
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      float ms = 0;
      if (error.empty()) cudaEventElapsedTime(&ms, p.start, p.end);
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.end);
      if (!error.empty()) {
        {
          std::lock_guard lock(mu_);
          broken_ = true;
          broken_message_ = error;
        }
        log::error("{}", error);
        ncclCommAbort(comm_);  // unblocks the stream; the destructor must not touch comm_ again
        comm_aborted_ = true;
      } else {
        std::lock_guard lock(mu_);
        stats_.add(p.kind, p.bytes, size(), ms / 1e3);
      }
      p.state->complete(ms / 1e3, error);
    }
  }

  Communicator& bootstrap_;
  int device_;
  CommOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* barrier_buf_ = nullptr;
  cudaEvent_t issued_ = nullptr;  // recorded on the model's stream as each collective is issued
  std::thread watcher_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  int64_t next_seq_ = 0;
  bool stop_ = false, broken_ = false, comm_aborted_ = false;
  std::string broken_message_;
  CommStats stats_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(bootstrap, device, options);
}

}  // namespace trainer::dist
