// The host's memory table (runtime/memory_backend.h): aligned memory, and copies and zeroing
// that are complete when they return (a host "stream" holds nothing).
//
// Note [Host memory on demand]
// A block of 1 MiB or more is mapped from the kernel (anonymous, private), whose pages read as
// zero until written and take no memory until then: a buffer costs what its users touch, not
// what it could hold (a workspace's unused top, a plan's slack), and allocating it costs no
// page faults up front (which a memset of a model's whole plan paid at every start: 0.3 s of
// system time for the default config's 281 MiB). Smaller blocks come from the heap, zeroed.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "runtime/alignment.h"
#include "runtime/error.h"
#include "runtime/memory_backend.h"

namespace trainer {

namespace {

constexpr size_t kMapped = size_t(1) << 20;  // blocks from this size are mapped

// The mapped blocks and their sizes, for munmap.
std::mutex mapped_mutex;
std::unordered_map<void*, size_t>& mapped() {
  static auto* blocks = new std::unordered_map<void*, size_t>;  // lives past static teardown
  return *blocks;
}

void* alloc_zeroed(size_t bytes) {
  const size_t rounded = (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  if (rounded >= kMapped) {
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "out of host memory allocating {:.1f} MiB", double(bytes) / 1048576.0);
    std::lock_guard lock(mapped_mutex);
    mapped().emplace(p, rounded);
    return p;  // page-aligned, so kDeviceAlignment-aligned; zero until written
  }
  void* p = std::aligned_alloc(kDeviceAlignment, rounded);
  CHECK(p, "out of host memory allocating {:.1f} MiB", double(bytes) / 1048576.0);
  std::memset(p, 0, bytes);
  return p;
}

void free_memory(void* ptr) noexcept {
  if (!ptr) return;
  {
    std::lock_guard lock(mapped_mutex);
    auto it = mapped().find(ptr);
    if (it != mapped().end()) {
      ::munmap(ptr, it->second);
      mapped().erase(it);
      return;
    }
  }
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
