// Owned, aligned memory on a device. The only owner of activation, parameter and optimizer
// storage; everything else holds views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/alignment.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace trainer {

class Buffer {
 public:
  static constexpr size_t kAlignment = kDeviceAlignment;

  Buffer() = default;
  // Allocates `bytes` (zero-filled) on `device`; throws trainer::Error when out of memory.
  explicit Buffer(size_t bytes, Device device = Device::cpu);
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

 private:
  void swap(Buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(device_, o.device_);
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

}  // namespace trainer
