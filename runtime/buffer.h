// Owned, aligned memory on a device. The only owner of activation, parameter and optimizer
// storage; everything else holds views.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/alignment.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace trainer {

// What a Buffer holds, by the categories of a run's memory plan (Note [Memory report] in
// app/memory_plan.h): fp32 masters and working copies of the weights, gradients, optimizer
// state, activations (with the batch's device copies), op workspace, communication buffers
// (gather slots, received shards, deterministic sums), and the rest, which no plan counts
// (pipeline staging, cuDNN's own workspace, a GEMM measurement's operands).
enum class MemoryUse : uint8_t {
  weights,
  gradients,
  optimizer,
  activations,
  workspace,
  communication,
  checkpoint,  // host copies for asynchronous saves (Note [Asynchronous checkpoints])
  other,
  kCount
};
inline constexpr const char* kMemoryUseNames[] = {"weights",     "gradients", "optimizer",
                                                  "activations", "workspace", "communication",
                                                  "checkpoint",  "other"};

// The bytes Buffers hold on one device, by MemoryUse: now and at most since the process began
// (or reset_peaks); `peak_total` is the largest sum at any one time.
struct MemoryUsage {
  std::array<int64_t, size_t(MemoryUse::kCount)> live{}, peak{};
  int64_t peak_total = 0;
  int64_t live_total() const;
};

class Buffer {
 public:
  static constexpr size_t kAlignment = kDeviceAlignment;

  Buffer() = default;
  // Allocates `bytes` (zero-filled) on `device`, counted under `use`; throws trainer::Error
  // when out of memory.
  explicit Buffer(size_t bytes, Device device = Device::cpu, MemoryUse use = MemoryUse::other);
  ~Buffer();
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    Buffer tmp(std::move(other));
    swap(tmp);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Sets every byte to zero.
  void zero();
  // A view of the whole buffer as `count` elements of `dtype` (count * size <= bytes()).
  Tensor view(DType dtype, int64_t count) const;

  // Bytes currently held by all Buffers on `device` (for checking memory plans).
  static size_t live_bytes(Device device);
  // The same by use, with the peaks.
  static MemoryUsage usage(Device device);
  // Starts the peaks afresh from what is held now (a benchmark's measured steps).
  static void reset_peaks(Device device);

 private:
  void swap(Buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(device_, o.device_);
    std::swap(use_, o.use_);
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
  MemoryUse use_ = MemoryUse::other;
};

}  // namespace trainer
