// Device memory alignment: every Buffer and every Workspace block starts at kDeviceAlignment
// (256 bytes, what cuBLASLt's workspace needs), whatever the sizes taken before it; and the
// alignment the libraries are told is the pointer's real one.
#include "runtime/alignment.h"

#include <gtest/gtest.h>

#include "runtime/buffer.h"
#include "runtime/workspace.h"

namespace trainer {
namespace {

TEST(Alignment, OfAPointerIsItsLowestSetBitCapped) {
  alignas(256) static char block[1024];
  EXPECT_EQ(pointer_alignment(block), 256u);
  EXPECT_EQ(pointer_alignment(block + 64), 64u);
  EXPECT_EQ(pointer_alignment(block + 2), 2u);
  EXPECT_EQ(pointer_alignment(block + 3), 1u);
  EXPECT_EQ(pointer_alignment(block + 512), 256u);  // capped
  EXPECT_EQ(pointer_alignment(block + 48, 16), 16u);
}

TEST(Alignment, EveryBufferAndWorkspaceBlock) {
  for (size_t bytes : {1, 3, 64, 100, 4096, 5000}) {
    Buffer b(bytes);
    EXPECT_EQ(pointer_alignment(b.data()), kDeviceAlignment) << bytes;
  }
  // Odd sizes in a row, as ops take them: the bias gradient's sums of an output width that is
  // not a multiple of 64, then cuBLASLt's workspace. Rounded up to 256 bytes each, the takes
  // below need 7.25 KiB in all: 64 KiB holds them 8x.
  Workspace ws(64 << 10, Device::cpu);
  Workspace::Scope scope(&ws);
  for (int64_t count : {1, 7, 100, 1000, 3}) {
    EXPECT_EQ(pointer_alignment(scope.take<float>(count)), kDeviceAlignment) << count;
    EXPECT_EQ(pointer_alignment(scope.take<char>(count)), kDeviceAlignment) << count;
  }
  EXPECT_EQ(Workspace::bytes_for<float>(100) % kDeviceAlignment, 0u);
}

}  // namespace
}  // namespace trainer
