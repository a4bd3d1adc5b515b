// The NCCL communicator for GPU buffers: collectives are enqueued on one dedicated CUDA stream
// in issue order; the engine's thread (dist/comm_engine.h) completes each Work when its end
// event fires, and fails it (and aborts the NCCL communicator) when it does not fire within
// timeout_s. Host buffers (the
// small count and hash vectors) go through the bootstrap communicator instead. Built only
// when CUDA and NCCL are found (TRAINER_DIST_NCCL).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "dist/comm_engine.h"
#include "dist/communicator.h"
#include "runtime/buffer.h"
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
    case DType::f16:
      return ncclFloat16;
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
  // Over `owned`'s ranks, which it keeps (a group's communicator, split()).
  NcclCommunicator(std::unique_ptr<Communicator> owned, int device, const CommOptions& options)
      : NcclCommunicator(*owned, device, options) {
    owned_bootstrap_ = std::move(owned);
  }
  NcclCommunicator(Communicator& bootstrap, int device, const CommOptions& options)
      : bootstrap_(bootstrap), device_(device), options_(options) {
    CUDA_CALL(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (bootstrap_.rank() == 0) NCCL_CALL(ncclGetUniqueId(&id));
    bootstrap_.broadcast(&id, sizeof(id), 0);
    NCCL_CALL(ncclCommInitRank(&comm_, bootstrap_.size(), id, bootstrap_.rank()));
    CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    barrier_ = Buffer(sizeof(float), Device::cuda);  // on device_, set above
    CUDA_CALL(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming));
    CUDA_CALL(cudaEventCreateWithFlags(&ordered_, cudaEventDisableTiming));
    engine_ = std::make_unique<CommEngine>(bootstrap_.size(), [this] { cudaSetDevice(device_); });
  }

  ~NcclCommunicator() override {
    engine_->stop();
    if (engine_->broken()) {
      if (!comm_aborted_) ncclCommAbort(comm_);
    } else {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    cudaEventDestroy(issued_);
    cudaEventDestroy(ordered_);
    cudaStreamDestroy(stream_);
  }

  // One NCCL communicator per group, made over the bootstrap's group (which carries the
  // group's host-buffer collectives too).
  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<NcclCommunicator>(bootstrap_.split(color, key), device_, options_);
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
      NCCL_CALL(
          ncclAllReduce(barrier_.data(), barrier_.data(), 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }
  // One NCCL group (ncclGroupStart/End) on the communicator's stream: every transfer's Work is
  // the group's.
  std::vector<Work> transfer_async(const std::vector<PeerTransfer>& transfers) override {
    double bytes = 0;
    std::string detail = " (NCCL";
    for (const PeerTransfer& t : transfers) {
      CHECK(t.peer >= 0 && t.peer < size() && on_device(t.data),
            "NCCL transfer with rank {} of {}: its buffer must be on the GPU", t.peer, size());
      bytes += double(t.count) * double(dtype_size(t.type));
      detail +=
          fmt::format("; {} {} bytes {} rank {}, tag {}", t.send ? "send" : "recv",
                      t.count * int64_t(dtype_size(t.type)), t.send ? "to" : "from", t.peer, t.tag);
    }
    const Work work = launch(
        "transfers", bytes,
        [&] {
          NCCL_CALL(ncclGroupStart());
          for (const PeerTransfer& t : transfers)
            if (t.send)
              NCCL_CALL(
                  ncclSend(t.data, size_t(t.count), nccl_type(t.type), t.peer, comm_, stream_));
            else
              NCCL_CALL(
                  ncclRecv(t.data, size_t(t.count), nccl_type(t.type), t.peer, comm_, stream_));
          NCCL_CALL(ncclGroupEnd());
        },
        detail + ")");
    return std::vector<Work>(transfers.size(), work);
  }
  CommStats stats() const override { return engine_->stats(); }
  const std::vector<std::string>& hosts() const override { return bootstrap_.hosts(); }
  std::string network() const override { return bootstrap_.network(); }

 private:
  // Queues `enqueue_op` on the communicator's stream, after what the model's stream holds so
  // far (a gradient bucket), between two events; the engine's thread waits for the second.
  // `detail` follows "<kind> #<seq>" in messages.
  template <typename Fn>
  Work launch(const char* kind, double bytes, Fn&& enqueue_op, std::string detail = " (NCCL)") {
    auto events = std::make_shared<std::pair<cudaEvent_t, cudaEvent_t>>();
    auto issue = [this, events, &enqueue_op] {
      CUDA_CALL(cudaEventCreate(&events->first));
      CUDA_CALL(cudaEventCreate(&events->second));
      CUDA_CALL(cudaEventRecord(issued_, static_cast<cudaStream_t>(options_.cuda_stream)));
      CUDA_CALL(cudaStreamWaitEvent(stream_, issued_, 0));
      CUDA_CALL(cudaEventRecord(events->first, stream_));
      enqueue_op();
      CUDA_CALL(cudaEventRecord(events->second, stream_));
    };
    const auto issued_at = std::make_shared<Clock::time_point>();
    return engine_->submit({kind, bytes, std::move(detail),
                            [issue, issued_at] {
                              issue();
                              *issued_at = Clock::now();
                            },
                            [this, events, issued_at](const std::string& name, int64_t) {
                              return wait(name, events->first, events->second, *issued_at);
                            },
                            0, 0, [this] { order_model_stream(); }});
  }

  // The model's stream waits for everything issued on this communicator's stream so far.
  void order_model_stream() {
    CUDA_CALL(cudaEventRecord(ordered_, stream_));
    CUDA_CALL(cudaStreamWaitEvent(static_cast<cudaStream_t>(options_.cuda_stream), ordered_, 0));
  }

  // Waits for the collective between `start` and `end` until timeout_s after it was issued;
  // returns its seconds on the stream. On a failure or timeout the NCCL communicator is
  // aborted (which unblocks the stream) and CommFailure thrown.
  double wait(const std::string& name, cudaEvent_t start, cudaEvent_t end,
              Clock::time_point issued_at) {
    const auto deadline = issued_at + std::chrono::duration<double>(options_.timeout_s);
    std::string error;
    for (;;) {
      const cudaError_t q = cudaEventQuery(end);
      if (q == cudaSuccess) break;
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (q != cudaErrorNotReady || (async_error != ncclSuccess && async_error != ncclInProgress)) {
        error = fmt::format(
            "{} failed on rank {}: {}", name, rank(),
            q != cudaErrorNotReady ? cudaGetErrorString(q) : ncclGetErrorString(async_error));
        break;
      }
      if (Clock::now() > deadline) {
        error = fmt::format(
            "{} timed out after {:.1f} s on rank {}: some rank did not arrive (NCCL cannot say "
            "which)",
            name, options_.timeout_s, rank());
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    float ms = 0;
    if (error.empty()) cudaEventElapsedTime(&ms, start, end);
    cudaEventDestroy(start);
    cudaEventDestroy(end);
    if (!error.empty()) {
      // Unblocks the stream and any caller stuck issuing on comm_; no caller issues on it
      // after (CommEngine::fail), and the destructor must not touch it again.
      engine_->fail(error, [this] {
        ncclCommAbort(comm_);
        comm_aborted_ = true;
      });
      throw CommFailure{error};
    }
    return ms / 1e3;
  }

  Communicator& bootstrap_;
  int device_;
  CommOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Buffer barrier_;                 // one float on the device, all-reduced by a barrier
  cudaEvent_t issued_ = nullptr;   // recorded on the model's stream as each collective is issued
  cudaEvent_t ordered_ = nullptr;  // recorded on stream_ for the model's stream to wait for
  bool comm_aborted_ = false;      // set by the engine's thread, read once it has stopped
  std::unique_ptr<CommEngine> engine_;  // made last: its thread waits on the members above
  // A group's bootstrap, destroyed once the destructor has stopped the engine.
  std::unique_ptr<Communicator> owned_bootstrap_;
};

}  // namespace

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "?";
  // NCCL_VERSION's encoding: 1000 major + 100 minor + patch up to 2.8, 10000 major after.
  const int major = v >= 10000 ? v / 10000 : v / 1000;
  const int minor = v >= 10000 ? (v / 100) % 100 : (v / 100) % 10;
  return fmt::format("{}.{}.{}", major, minor, v % 100);
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(bootstrap, device, options);
}

}  // namespace trainer::dist
