// The CUDA runtime pieces against the CPU: device memory round trips, zeroing and the free
// memory figure. Skips when no GPU is present, so a CUDA build still passes on CPU-only
// machines.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/buffer.h"
#include "runtime/cuda/memory.h"
#include "runtime/device.h"

namespace trainer {

// The figure the memory check compares a plan with (Note [Memory check]): free device memory
// falls by at least what a buffer takes while it lives.
TEST(Cuda, FreeMemoryShrinksByAnAllocation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr size_t kBytes = size_t(256) << 20;
  const size_t before = cuda_free_memory();
  ASSERT_GT(before, 2 * kBytes);
  {
    Buffer dev(kBytes, Device::cuda);
    EXPECT_LE(cuda_free_memory(), before - kBytes);
  }
  EXPECT_GE(cuda_free_memory() + (kBytes / 4), before);  // given back (the runtime may cache)
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
