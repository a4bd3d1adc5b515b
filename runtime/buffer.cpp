#include "runtime/buffer.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "runtime/cuda/memory.h"
#include "runtime/error.h"

namespace trainer {

namespace {
std::atomic<size_t> g_live[2];  // per Device
}  // namespace

size_t Buffer::live_bytes(Device device) {
  return g_live[size_t(device)].load();
}

Tensor Buffer::view(DType dtype, int64_t count) const {
  TRAINER_ASSERT(size_t(count) * dtype_size(dtype) <= bytes_, "view of {} {} in {} bytes", count,
                 dtype_name(dtype), bytes_);
  return make_tensor(data_, dtype, {count}, device_);
}

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  switch (device) {
    case Device::cpu: {
      size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
      data_ = std::aligned_alloc(kAlignment, rounded);
      CHECK(data_, "out of host memory allocating {:.1f} MiB", bytes / 1048576.0);
      std::memset(data_, 0, bytes);
      break;
    }
    case Device::cuda:
      data_ = cuda_malloc_zeroed(bytes);
      break;
  }
  g_live[size_t(device)] += bytes;
}

Buffer::~Buffer() {
  if (!data_) return;
  switch (device_) {
    case Device::cpu:
      std::free(data_);
      break;
    case Device::cuda:
      cuda_free(data_);
      break;
  }
  g_live[size_t(device_)] -= bytes_;
}

void Buffer::zero() {
  if (!data_) return;
  switch (device_) {
    case Device::cpu:
      std::memset(data_, 0, bytes_);
      break;
    case Device::cuda:
      cuda_memset_zero(data_, bytes_);
      break;
  }
}

}  // namespace trainer
