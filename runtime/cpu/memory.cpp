// The host's memory table (runtime/memory_backend.h): aligned heap memory, and copies and
// zeroing that are complete when they return (a host "stream" holds nothing).
#include <cstdlib>
#include <cstring>

#include "runtime/alignment.h"
#include "runtime/error.h"
#include "runtime/memory_backend.h"

namespace trainer {

namespace {

void* alloc_zeroed(size_t bytes) {
  const size_t rounded = (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  void* p = std::aligned_alloc(kDeviceAlignment, rounded);
  CHECK(p, "out of host memory allocating {:.1f} MiB", double(bytes) / 1048576.0);
  std::memset(p, 0, bytes);
  return p;
}

void free_memory(void* ptr) noexcept {
  std::free(ptr);
}

void zero(void* ptr, size_t bytes) {
  std::memset(ptr, 0, bytes);
}

void zero_async(void* ptr, size_t bytes, void*) {
  std::memset(ptr, 0, bytes);
}

void copy_async(void* dst, const void* src, size_t bytes, void*) {
  std::memmove(dst, src, bytes);
}

void synchronize(void*) {}

}  // namespace

extern const MemoryKernels kCpuMemory{alloc_zeroed, free_memory, zero,
                                      zero_async,   copy_async,  synchronize};

}  // namespace trainer
