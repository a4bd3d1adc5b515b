// The CUDA entry points of a CPU-only build: each reports that the backend is absent.
#include "runtime/cuda/memory.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/gemm_backend.h"
#include "runtime/memory_backend.h"

namespace trainer {

bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
std::string cuda_versions() {
  return "no CUDA backend";
}
int64_t cudnn_version() {
  return 0;
}

size_t cuda_free_memory() {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_copy(void*, const void*, size_t) {
  THROW_ERROR("this trainer was built without the CUDA backend");
}
void cuda_copy_async(void*, const void*, size_t, void*) {
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
extern const GemmKernels* const kCudaGemm = nullptr;      // no CUDA products
extern const MemoryKernels* const kCudaMemory = nullptr;  // no CUDA memory

}  // namespace trainer
