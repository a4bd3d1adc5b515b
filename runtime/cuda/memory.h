// Device memory for the CUDA backend. Without it (a CPU-only build) each call throws a clear
// error, so CPU code can name Device::cuda in its switches without #ifdefs.
#pragma once

#include <cstddef>

namespace trainer {

void* cuda_malloc_zeroed(size_t bytes);
// Free memory on the current device, in bytes (cudaMemGetInfo).
size_t cuda_free_memory();
void cuda_free(void* ptr) noexcept;
// Zeroes device memory and waits for it (visible to every stream); outside the step only.
void cuda_memset_zero(void* ptr, size_t bytes);
// Copies between host and device memory (direction inferred by the runtime), after all work
// queued on the device, on any stream, and before anything after it: for code that has no
// stream of its own (the single-process communicator, tests).
void cuda_copy(void* dst, const void* src, size_t bytes);
// The same queued on `stream` (a cudaStream_t; null: the legacy default stream): the host does
// not wait, except that pageable host memory is staged before the call returns.
void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream);
void cuda_memset_zero_async(void* ptr, size_t bytes, void* stream);
// Waits for the work queued on `stream` (a cudaStream_t; null: the default stream).
void cuda_synchronize(void* stream);

// Handles for runtime/cuda/stream.h's RAII types (opaque cudaStream_t, cudaEvent_t, pinned
// host memory).
void* cuda_stream_create();
void cuda_stream_destroy(void* stream) noexcept;
void* cuda_event_create();
void cuda_event_destroy(void* event) noexcept;
// Marks the point `stream` has reached; event_wait blocks the host until the work before it is
// done; stream_wait_event makes `stream`'s later work wait for it (the host does not).
void cuda_event_record(void* event, void* stream);
void cuda_event_wait(void* event);
void cuda_stream_wait_event(void* stream, void* event);
// A timing event (for the profile) and the milliseconds between two recorded ones.
void* cuda_timing_event_create();
float cuda_event_elapsed_ms(void* start, void* end);
void* cuda_host_alloc(size_t bytes);
void cuda_host_free(void* ptr) noexcept;
// Stream capture, for runtime/cuda/stream.h's CudaGraph: capture_begin records what this thread
// queues on `stream` instead of running it; capture_end stops and instantiates it (an opaque
// cudaGraphExec_t; throws with CUDA's reason when the capture failed); capture_abort stops and
// discards it (for an exception thrown while capturing).
void cuda_capture_begin(void* stream);
void* cuda_capture_end(void* stream);
void cuda_capture_abort(void* stream) noexcept;
void cuda_graph_launch(void* exec, void* stream);
void cuda_graph_destroy(void* exec) noexcept;

}  // namespace trainer
