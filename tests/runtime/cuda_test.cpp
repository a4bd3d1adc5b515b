// The CUDA runtime pieces against the CPU: device memory round trips, zeroing and the free
// memory figure. Skips when no GPU is present, so a CUDA build still passes on CPU-only
// machines.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/memory.h"
#include "runtime/device.h"

namespace trainer {

// The figure the memory check compares a plan with (Note [Memory check]): free device memory
// falls by at least what a buffer takes while it lives.
TEST(Cuda, FreeMemoryShrinksByAnAllocation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // 256 MiB: a multiple of the driver's 2 MiB pages, and far above what the runtime may
  // allocate for itself meanwhile (modules it loads lazily for the zeroing).
  constexpr size_t kBytes = size_t(256) << 20;
  const size_t before = cuda_free_memory();
  ASSERT_GT(before, 2 * kBytes);  // room for the buffer with as much again to spare
  {
    // cudaMalloc takes whole pages, at least kBytes; what the runtime loads lazily only lowers
    // free memory further.
    Buffer dev(kBytes, Device::cuda);
    EXPECT_LE(cuda_free_memory(), before - kBytes);
  }
  // cudaFree gives the pages back at once; kBytes / 4 (64 MiB) is slack for what the runtime
  // allocated for itself since `before`. The buffer kept would be 4x that.
  EXPECT_GE(cuda_free_memory() + (kBytes / 4), before);
}

// cuBLASLt is loaded on first use, not linked (runtime/cuda/cublaslt.h): the library this build
// names loads and has every entry point the products call. Needs the library, not a GPU.
TEST(Cuda, CublasLtLoadsWithEveryEntryPoint) {
  const cuda::CublasLt& lt = cuda::cublaslt();
  EXPECT_NE(lt.Create, nullptr);
  EXPECT_NE(lt.Matmul, nullptr);
  EXPECT_NE(lt.MatrixLayoutDestroy, nullptr);
  EXPECT_GT(std::string(lt.GetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)).size(), 0u);
  EXPECT_EQ(&cuda::cublaslt(), &lt);  // loaded once
}

TEST(Cuda, BufferRoundTrip) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) * 0.5f;
  Buffer dev(host.size() * sizeof(float), Device::cuda);
  cuda_copy(dev.data(), host.data(), dev.bytes());
  std::vector<float> back(host.size(), -1.0f);
  cuda_copy(back.data(), dev.data(), dev.bytes());
  EXPECT_EQ(back, host);
  dev.zero();
  cuda_copy(back.data(), dev.data(), dev.bytes());
  for (float v : back) ASSERT_EQ(v, 0.0f);
}

}  // namespace trainer
