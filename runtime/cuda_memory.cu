// Device memory and device discovery for the CUDA backend.
#include "runtime/cuda_check.h"
#include "runtime/cuda_memory.h"
#include "runtime/device.h"

namespace trainer {

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

void* cuda_malloc_zeroed(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

void cuda_free(void* ptr) noexcept {
  cudaFree(ptr);
}

void cuda_memset_zero(void* ptr, size_t bytes) {
  CUDA_CHECK(cudaMemset(ptr, 0, bytes));
}

void cuda_copy(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void cuda_synchronize(void* stream) {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

}  // namespace trainer
