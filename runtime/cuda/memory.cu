// Device memory and device discovery for the CUDA backend.
#include "runtime/cuda/check.h"
#include "runtime/cuda/memory.h"
#include "runtime/device.h"
#include "runtime/memory_backend.h"

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
  // Zero before any stream uses it: models run on non-blocking streams, which do not wait
  // for the legacy default stream the memset went to. (Allocation happens at construction.)
  CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

void cuda_free(void* ptr) noexcept {
  cudaFree(ptr);
}

size_t cuda_free_memory() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

void cuda_memset_zero(void* ptr, size_t bytes) {
  CUDA_CHECK(cudaMemset(ptr, 0, bytes));
  CUDA_CHECK(cudaDeviceSynchronize());  // visible to every stream
}

void cuda_copy(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaDeviceSynchronize());  // the model's non-blocking stream included
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  CUDA_CHECK(cudaDeviceSynchronize());
}

void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

void cuda_memset_zero_async(void* ptr, size_t bytes, void* stream) {
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream)));
}

void cuda_synchronize(void* stream) {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void* cuda_stream_create() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void cuda_stream_destroy(void* stream) noexcept {
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

void* cuda_event_create() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void cuda_event_destroy(void* event) noexcept {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void cuda_event_record(void* event, void* stream) {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

void cuda_event_wait(void* event) {
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void cuda_stream_wait_event(void* stream, void* event) {
  CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

void* cuda_timing_event_create() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

float cuda_event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

void* cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void cuda_host_free(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);
}

void cuda_capture_begin(void* stream) {
  CUDA_CHECK(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
}

void* cuda_capture_end(void* stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (ended != cudaSuccess) {
    (void)cudaGetLastError();  // reported here, not by the next kernel's launch check
    THROW_ERROR("CUDA stream capture failed: {}", cudaGetErrorString(ended));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    THROW_ERROR("CUDA graph instantiation failed: {}", cudaGetErrorString(err));
  }
  return exec;
}

void cuda_capture_abort(void* stream) noexcept {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph) == cudaSuccess && graph)
    cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // the invalidated capture's error is the exception's, not the next
                             // call's
}

void cuda_graph_launch(void* exec, void* stream) {
  CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)));
}

void cuda_graph_destroy(void* exec) noexcept {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

// The CUDA backend's memory table (runtime/memory_backend.h).
const MemoryKernels kCudaMemoryTable{cuda_malloc_zeroed,     cuda_free,       cuda_memset_zero,
                                     cuda_memset_zero_async, cuda_copy_async, cuda_synchronize};
const MemoryKernels* const kCudaMemory = &kCudaMemoryTable;

}  // namespace trainer
