// cuDNN attention's planned workspace (Note [cuDNN attention workspace]), checked on any machine:
// the deterministic backward's dP tiles at the benchmark shapes, the cap past which it is not
// planned, the non-deterministic backward's fp32 dQ accumulator, and that the model's workspace
// holds the plan on a CUDA configuration; and which shapes each cuDNN version serves.
#include "nn/ops/attention_cudnn_workspace.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/workspace.h"

namespace trainer::nn {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

TEST(CudnnAttentionWorkspace, DeterministicBackwardPlansTheDpTiles) {
  // GPT-2 124M at B=8, T=1024: 8 x 12 x 1024^2 x 2 bytes = 192 MiB (the 16 MiB that was planned
  // before refused every backward at this shape); 350M: 8 x 16 heads = 256 MiB.
  EXPECT_EQ(cudnn_attention_workspace_plan(8, 12, 1024, 64, true, true).engine,
            192 * kMiB + kCudnnEngineAllowance);
  EXPECT_EQ(cudnn_attention_workspace_plan(8, 16, 1024, 64, true, true).engine,
            256 * kMiB + kCudnnEngineAllowance);
  // T is rounded up to 64 per tile: 100 tokens take 128 x 128.
  EXPECT_EQ(cudnn_attention_workspace_plan(1, 1, 100, 64, true, true).engine,
            128 * 128 * 2 + kCudnnEngineAllowance);
  // Past the cap (B=8, T=8192: 12 GiB) it is not planned: the run falls back and says so.
  EXPECT_EQ(cudnn_attention_workspace_plan(8, 12, 8192, 64, true, true).engine,
            kCudnnEngineAllowance);
}

TEST(CudnnAttentionWorkspace, TheOtherBackwardAccumulatesDqInScratch) {
  const CudnnAttentionWorkspace det = cudnn_attention_workspace_plan(8, 12, 1024, 64, true, true);
  const CudnnAttentionWorkspace fast = cudnn_attention_workspace_plan(8, 12, 1024, 64, true, false);
  EXPECT_EQ(fast.engine, kCudnnEngineAllowance);
  // The accumulator: up to N x 3HD fp32 (a packed batch's has dQ's row stride, that of the
  // q, k, v gradient) = 8192 x 3 x 12 x 64 x 4 bytes = 72 MiB.
  EXPECT_EQ(fast.scratch - det.scratch, 72 * kMiB);
  EXPECT_LT(fast.total(), det.total());  // 72 MiB of dQ accumulator against 192 MiB of dP tiles
  // The forward needs only the statistics and the ragged layout beside its allowance.
  const CudnnAttentionWorkspace fwd = cudnn_attention_workspace_plan(8, 12, 1024, 64, false, true);
  EXPECT_EQ(fwd.engine, kCudnnEngineAllowance);
  EXPECT_LT(fwd.scratch, det.scratch);  // backward adds the row sums of dO * O: N x H floats
  EXPECT_EQ(fwd.scratch % int64_t(Workspace::kAlignment), 0);
}

TEST(CudnnAttentionWorkspace, RaggedBucketsArePowersOfTwoFromEight) {
  EXPECT_EQ(cudnn_ragged_bucket(1), 8);
  EXPECT_EQ(cudnn_ragged_bucket(8), 8);
  EXPECT_EQ(cudnn_ragged_bucket(9), 16);
  EXPECT_EQ(cudnn_ragged_bucket(1000), 1024);
}

// Which calls a cuDNN version serves (the parity test on a GPU fails any other fallback): the
// training shapes from 9.x on, packed rows from 9.6, lengths-free T off a multiple of 128 only
// from 9.15.1, and never 9.10.0 or 9.10.1.
TEST(CudnnAttentionEligibility, EachVersionServesWhatItsEnginesTake) {
  // GPT-2 124M's shape (head size 64, 12 heads), causal, T = 1024.
  EXPECT_EQ(cudnn_attention_ineligible(91400, 1024, 64, 12, false, false), "");
  EXPECT_EQ(cudnn_attention_ineligible(90200, 1024, 64, 12, false, false), "");
  for (int64_t bad : {91000, 91001})
    EXPECT_NE(cudnn_attention_ineligible(bad, 1024, 64, 12, false, false).find("known bugs"),
              std::string::npos);
  EXPECT_EQ(cudnn_attention_ineligible(91002, 1024, 64, 12, false, false), "");
  // Head sizes: multiples of 8 up to 128.
  EXPECT_EQ(cudnn_attention_ineligible(91400, 1024, 128, 8, false, false), "");
  EXPECT_NE(cudnn_attention_ineligible(91400, 1024, 12, 8, false, false), "");
  EXPECT_NE(cudnn_attention_ineligible(91400, 1024, 256, 8, false, false), "");
  // T off a multiple of 128 without lengths: from 9.15.1; with lengths, always.
  EXPECT_NE(cudnn_attention_ineligible(91500, 1000, 64, 12, false, false), "");
  EXPECT_EQ(cudnn_attention_ineligible(91501, 1000, 64, 12, false, false), "");
  EXPECT_EQ(cudnn_attention_ineligible(90200, 1000, 64, 12, false, true), "");
  // Packed rows: 9.6 on, head size a multiple of 16, heads a multiple of 4.
  EXPECT_EQ(cudnn_attention_ineligible(90600, 1024, 64, 12, true, false), "");
  EXPECT_NE(cudnn_attention_ineligible(90500, 1024, 64, 12, true, false), "");
  EXPECT_NE(cudnn_attention_ineligible(91400, 1024, 40, 12, true, false), "");
  EXPECT_NE(cudnn_attention_ineligible(91400, 1024, 64, 6, true, false), "");
  EXPECT_NE(cudnn_attention_ineligible(91400, 1024, 64, 12, true, true), "");
}

// A shape whose plans all need more than planned is planned again from the refusal's own
// figure, where the device keeps kCudnnReplanReserve free; else it falls back.
TEST(CudnnAttentionWorkspace, ARefusedPlanIsMadeAgainFromTheNeedItStates) {
  const int64_t planned = 208 * kMiB, free = 40 * 1024 * kMiB;
  EXPECT_EQ(cudnn_replan_workspace(planned, 300 * kMiB, free), 300 * kMiB);
  EXPECT_EQ(cudnn_replan_workspace(planned, 0, free), 0);        // not refused for its size
  EXPECT_EQ(cudnn_replan_workspace(planned, planned, free), 0);  // no more than planned
  EXPECT_EQ(cudnn_replan_workspace(planned, 300 * kMiB, 1024 * kMiB), 0);  // the reserve
  EXPECT_EQ(cudnn_replan_workspace(planned, 300 * kMiB, 300 * kMiB + kCudnnReplanReserve),
            300 * kMiB);
}

}  // namespace
}  // namespace trainer::nn
