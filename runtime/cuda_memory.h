// Device memory for the CUDA backend. Without it (a CPU-only build) each call throws a clear
// error, so CPU code can name Device::cuda in its switches without #ifdefs.
#pragma once

#include <cstddef>

namespace trainer {

void* cuda_malloc_zeroed(size_t bytes);
void cuda_free(void* ptr) noexcept;
void cuda_memset_zero(void* ptr, size_t bytes);
// Copies between host and device memory (direction inferred by the runtime).
void cuda_copy(void* dst, const void* src, size_t bytes);
// Waits for the work queued on `stream` (a cudaStream_t; null: the default stream).
void cuda_synchronize(void* stream);

}  // namespace trainer
