// The CUDA entry points of a CPU-only build: each reports that the backend is absent.
#include "runtime/cuda_memory.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/gemm_cuda.h"

namespace trainer {

bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}

void* cuda_malloc_zeroed(size_t) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_free(void*) noexcept {}
void cuda_memset_zero(void*, size_t) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_copy(void*, const void*, size_t) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_synchronize(void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_matmul(const Context&, const Tensor&, const Tensor&, bool, const Tensor&, bool, float,
                 float, const Tensor*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}

}  // namespace trainer
