// RAII owners of a CUDA stream, an event, pinned (page-locked) host memory and a captured
// graph, and the double-buffered upload of a model's inputs through them. They build in a CPU-only
// build too, where creating one throws (runtime/cuda/absent.cpp).
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "runtime/cuda/memory.h"
#include "runtime/error.h"

namespace trainer {

// A non-blocking stream: it does not wait for the legacy default stream.
class CudaStream {
 public:
  CudaStream() : s_(cuda_stream_create()) {}
  ~CudaStream() { cuda_stream_destroy(s_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  void* get() const { return s_; }

 private:
  void* s_;
};

// An event without timing, for ordering and for the host to wait on.
class CudaEvent {
 public:
  CudaEvent() : e_(cuda_event_create()) {}
  ~CudaEvent() { cuda_event_destroy(e_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void record(void* stream) { cuda_event_record(e_, stream); }
  void wait() const { cuda_event_wait(e_); }
  void* get() const { return e_; }

 private:
  void* e_;
};

// Page-locked host memory: copies from it to the device run asynchronously.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) : p_(cuda_host_alloc(bytes)), bytes_(bytes) {}
  ~PinnedBuffer() { cuda_host_free(p_); }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA graph: the work fn() queues on `stream`, captured (not run) at construction and run
// again by each launch with the same arguments and memory. A capture that fails, or an
// exception from fn(), throws; the stream is then left as it was.
class CudaGraph {
 public:
  CudaGraph(void* stream, const std::function<void()>& fn) {
    cuda_capture_begin(stream);
    try {
      fn();
    } catch (...) {
      cuda_capture_abort(stream);
      throw;
    }
    exec_ = cuda_capture_end(stream);
  }
  ~CudaGraph() { cuda_graph_destroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void launch(void* stream) const { cuda_graph_launch(exec_, stream); }

 private:
  void* exec_ = nullptr;
};

// Note [Batch upload]
// A model's inputs (token ids, targets, positions, segments, lengths: a few hundred KiB) go to
// the device through one of two pinned host buffers, copied asynchronously on the model's
// stream. Before a buffer is refilled the host waits for the copies made from it last time,
// two batches back and long done, so the host queues a whole step without waiting for the
// device; the copies themselves take microseconds on the stream. Backward's loss scale (a
// device scalar the loss reads, so that a CUDA graph takes each step's) goes through an upload
// of its own, so it does not shorten the batches' lookahead.
class PinnedUpload {
 public:
  // Room for `bytes` per batch in each buffer.
  explicit PinnedUpload(size_t bytes) {
    for (int i = 0; i < 2; ++i) {
      buffers_[i] = PinnedBuffer(bytes);
      copied_[i] = std::make_unique<CudaEvent>();
    }
  }
  // Starts a batch in the buffer the last one did not use.
  void begin() {
    half_ ^= 1;
    copied_[half_]->wait();
    used_ = 0;
  }
  // dst (device) = src[0, bytes) (host), queued on `stream`.
  void copy(void* dst, const void* src, size_t bytes, void* stream) {
    TRAINER_ASSERT(used_ + bytes <= buffers_[half_].bytes(), "upload of {} bytes past {}",
                   used_ + bytes, buffers_[half_].bytes());
    char* staged = static_cast<char*>(buffers_[half_].data()) + used_;
    std::memcpy(staged, src, bytes);
    cuda_copy_async(dst, staged, bytes, stream);
    used_ += bytes;
  }
  // Ends the batch: its buffer is free again once `stream` has passed its copies.
  void end(void* stream) { copied_[half_]->record(stream); }

 private:
  PinnedBuffer buffers_[2];
  std::unique_ptr<CudaEvent> copied_[2];
  int half_ = 1;
  size_t used_ = 0;
};

}  // namespace trainer
