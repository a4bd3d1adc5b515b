// One table of memory functions per backend: Buffer (runtime/buffer.h) and the copies
// (runtime/memory.h) take the device's table instead of switching on the device, as the ops
// (nn/ops/kernels.h) and the matrix products (runtime/gemm_backend.h) do. A backend this build
// lacks has no table.
#pragma once

#include <cstddef>

#include "runtime/device.h"

namespace trainer {

struct MemoryKernels {
  // `bytes` of zeroed memory, aligned to kDeviceAlignment; throws when there is not enough.
  void* (*alloc_zeroed)(size_t bytes);
  void (*free)(void* ptr) noexcept;
  // Sets `bytes` at ptr to zero, complete on return.
  void (*zero)(void* ptr, size_t bytes);
  // The same, queued on `stream` (the host's backend: done at once).
  void (*zero_async)(void* ptr, size_t bytes, void* stream);
  // dst = src for `bytes`, either on this device or on the host, queued on `stream`.
  void (*copy_async)(void* dst, const void* src, size_t bytes, void* stream);
  // Waits for what `stream` holds.
  void (*synchronize)(void* stream);
};

extern const MemoryKernels kCpuMemory;          // cpu/memory.cpp
extern const MemoryKernels* const kCudaMemory;  // cuda/memory.cu; null without CUDA

// The table of `device`'s backend; throws (naming the backend) where this build has none.
const MemoryKernels& memory_kernels(Device device);

}  // namespace trainer
