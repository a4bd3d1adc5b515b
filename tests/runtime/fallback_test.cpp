// Fallback counts: every call of a slower path is counted under its path with its latest reason,
// and reset() starts the count again (the bench and the parity test read them).
#include "runtime/fallback.h"

#include <gtest/gtest.h>

namespace trainer::fallback {
namespace {

TEST(Fallback, CountsEveryCallByPath) {
  reset();
  EXPECT_TRUE(counts().empty());
  note("cudnn_attention_backward", "no engine configuration within 16 MiB");
  note("cudnn_attention_backward", "no engine configuration within 16 MiB");
  note("cublaslt_dgelu_epilogue", "no algorithm");
  note("cudnn_attention_backward", "head size 4");
  const std::vector<Count> c = counts();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].path, "cublaslt_dgelu_epilogue");
  EXPECT_EQ(c[0].calls, 1);
  EXPECT_EQ(c[1].path, "cudnn_attention_backward");
  EXPECT_EQ(c[1].calls, 3);
  EXPECT_EQ(c[1].why, "head size 4");
  reset();
  EXPECT_TRUE(counts().empty());
}

}  // namespace
}  // namespace trainer::fallback
