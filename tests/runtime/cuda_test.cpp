// The CUDA runtime pieces against the CPU: device memory round trips and zeroing. Skips when
// no GPU is present, so a CUDA build still passes on CPU-only machines.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/buffer.h"
#include "runtime/cuda_memory.h"
#include "runtime/device.h"

namespace trainer {

TEST(Cuda, BuiltWithTheBackend) {
  EXPECT_TRUE(cuda_built());
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
