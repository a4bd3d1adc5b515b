#include "runtime/buffer.h"

#include <algorithm>
#include <mutex>

#include "runtime/error.h"
#include "runtime/memory_backend.h"

namespace trainer {

namespace {

constexpr size_t kUses = size_t(MemoryUse::kCount);

// One device's counts. Allocations come from the training thread and the loader's, rarely:
// a mutex keeps the peaks exact (a peak is a sum at one instant).
struct Counts {
  std::mutex mutex;
  MemoryUsage usage;
};
Counts g_counts[2];  // per Device

void count(Device device, MemoryUse use, int64_t bytes) {
  Counts& c = g_counts[size_t(device)];
  std::lock_guard lock(c.mutex);
  MemoryUsage& u = c.usage;
  int64_t& live = u.live[size_t(use)];
  live += bytes;
  u.peak[size_t(use)] = std::max(u.peak[size_t(use)], live);
  u.peak_total = std::max(u.peak_total, u.live_total());
}

}  // namespace

int64_t MemoryUsage::live_total() const {
  int64_t sum = 0;
  for (int64_t b : live) sum += b;
  return sum;
}

size_t Buffer::live_bytes(Device device) {
  return size_t(usage(device).live_total());
}

MemoryUsage Buffer::usage(Device device) {
  Counts& c = g_counts[size_t(device)];
  std::lock_guard lock(c.mutex);
  return c.usage;
}

void Buffer::reset_peaks(Device device) {
  Counts& c = g_counts[size_t(device)];
  std::lock_guard lock(c.mutex);
  c.usage.peak = c.usage.live;
  c.usage.peak_total = c.usage.live_total();
}

Tensor Buffer::view(DType dtype, int64_t count) const {
  TRAINER_ASSERT(size_t(count) * dtype_size(dtype) <= bytes_, "view of {} {} in {} bytes", count,
                 dtype_name(dtype), bytes_);
  return make_tensor(data_, dtype, {count}, device_);
}

Buffer::Buffer(size_t bytes, Device device, MemoryUse use)
    : bytes_(bytes), device_(device), use_(use) {
  if (bytes == 0) return;
  data_ = memory_kernels(device).alloc_zeroed(bytes);
  count(device, use, int64_t(bytes));
}

Buffer::~Buffer() {
  if (!data_) return;
  memory_kernels(device_).free(data_);
  count(device_, use_, -int64_t(bytes_));
}

void Buffer::zero() {
  if (data_) memory_kernels(device_).zero(data_, bytes_);
}

}  // namespace trainer
