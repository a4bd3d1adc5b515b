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
size_t cuda_free_memory() {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_memset_zero(void*, size_t) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_copy(void*, const void*, size_t) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_copy_async(void*, const void*, size_t, void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_memset_zero_async(void*, size_t, void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_synchronize(void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void* cuda_stream_create() {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_stream_destroy(void*) noexcept {}
void* cuda_event_create() {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_event_destroy(void*) noexcept {}
void cuda_event_record(void*, void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_event_wait(void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_stream_wait_event(void*, void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void* cuda_timing_event_create() {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
float cuda_event_elapsed_ms(void*, void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void* cuda_host_alloc(size_t) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_host_free(void*) noexcept {}
void cuda_capture_begin(void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void* cuda_capture_end(void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_capture_abort(void*) noexcept {}
void cuda_graph_launch(void*, void*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_graph_destroy(void*) noexcept {}
void cuda_matmul(const Context&, const Tensor&, const Tensor&, bool, const Tensor&, bool, float,
                 float, const Tensor*) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
bool cuda_matmul_gelu(const Context&, const Tensor&, const Tensor&, const Tensor&, bool,
                      const Tensor&, bool, const Tensor&) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
bool cuda_matmul_bias_grad(const Context&, const Tensor&, const Tensor&, bool, const Tensor&, float,
                           float, const Tensor&) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
bool cuda_matmul_dgelu(const Context&, const Tensor&, const Tensor&, bool, const Tensor&, bool,
                       const Tensor&) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}

}  // namespace trainer
