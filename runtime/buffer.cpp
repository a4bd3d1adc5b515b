#include "runtime/buffer.h"

#include <atomic>

#include "runtime/error.h"
#include "runtime/memory_backend.h"

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
  data_ = memory_kernels(device).alloc_zeroed(bytes);
  g_live[size_t(device)] += bytes;
}

Buffer::~Buffer() {
  if (!data_) return;
  memory_kernels(device_).free(data_);
  g_live[size_t(device_)] -= bytes_;
}

void Buffer::zero() {
  if (data_) memory_kernels(device_).zero(data_, bytes_);
}

}  // namespace trainer
