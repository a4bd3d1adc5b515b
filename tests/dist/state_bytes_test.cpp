// The arithmetic of model state per rank under each sharding stage (what `trainer plan`
// prints), checked for a 70B-parameter model in bf16 with bf16 gradients.
#include <gtest/gtest.h>

#include "dist/data_parallel.h"
#include "dist/sharding.h"

namespace trainer::dist {
namespace {

constexpr int64_t kParams = 70'000'000'000;
constexpr double GB = 1e9;

StateBytes bytes(ShardingStage stage, int world) {
  ParallelConfig pc;
  pc.sharding = stage;
  return state_bytes_for(kParams, pc, world, DType::bf16, DType::bf16);
}

TEST(StateBytes, SeventyBillionParametersInMixedPrecision) {
  // The often quoted 840 GB: bf16 weights 140, bf16 gradients 140, fp32 Adam moments 560 ...
  const StateBytes one = bytes(ShardingStage::none, 1);
  EXPECT_EQ(one.working, 140 * GB);
  EXPECT_EQ(one.grads, 140 * GB);
  EXPECT_EQ(one.optimizer, 560 * GB);
  EXPECT_EQ(one.working + one.grads + one.optimizer, 840 * GB);
  // ... leaves out the fp32 master weights: 16 bytes per parameter, 1,120 GB.
  EXPECT_EQ(one.masters, 280 * GB);
  EXPECT_EQ(one.total(), 1120 * GB);
  EXPECT_EQ(one.total(), 16 * kParams);

  // Per rank at 256 ranks (70e9 / 256 = 273,437,500 parameters per shard).
  const int N = 256;
  const int64_t shard = kParams / N;
  ASSERT_EQ(shard * N, kParams);
  EXPECT_EQ(bytes(ShardingStage::none, N).total(), 1120 * GB);  // DDP: a full replica each
  // optimizer (ZeRO-1): bf16 weights and gradients whole (280 GB); fp32 masters, AdamW
  // moments, the fp32 gradient shard and the bf16 reduce-scatter result: 18 B per shard
  // parameter.
  const StateBytes z1 = bytes(ShardingStage::optimizer, N);
  EXPECT_EQ(z1.working + z1.grads - 4 * shard, 280 * GB);
  EXPECT_EQ(z1.total(), 280 * GB + 18 * shard);
  EXPECT_NEAR(z1.total() / GB, 284.92, 0.01);  // 284.921875 quoted to 2 decimals; integer bytes
  // gradients (ZeRO-2): bf16 weights whole (140 GB); masters, moments and the gradient shard:
  // 16 B per shard parameter (the unit scratch buffers come on top; they depend on the shape).
  const StateBytes z2 = bytes(ShardingStage::gradients, N);
  EXPECT_EQ(z2.total(), 140 * GB + 16 * shard);
  EXPECT_NEAR(z2.total() / GB, 144.375, 1e-9);
  // full (ZeRO-3): 16 B per shard parameter, 1/256 of 1,120 GB = 4.375 GB (plus unit buffers).
  const StateBytes z3 = bytes(ShardingStage::full, N);
  EXPECT_EQ(z3.total(), 16 * shard);
  EXPECT_NEAR(z3.total() / GB, 4.375, 1e-9);
}

// For a real layout the plan is the general arithmetic plus the unit buffers and padding.
TEST(StateBytes, PlanOfALayoutIsTheArithmeticPlusUnitBuffers) {
  nn::ModelConfig m;
  m.vocab_size = 50304;
  m.max_seq_len = 1024;
  m.n_layer = 12;
  m.n_head = 12;
  m.n_embd = 768;
  const nn::ParamLayout layout(m);
  for (ShardingStage stage :
       {ShardingStage::optimizer, ShardingStage::gradients, ShardingStage::full})
    for (int world : {2, 8, 64}) {
      ParallelConfig pc;
      pc.sharding = stage;
      const StateBytes plan = planned_state_bytes(layout, pc, world, DType::bf16, DType::f32);
      const StateBytes general =
          state_bytes_for(layout.total(), pc, world, DType::bf16, DType::f32);
      // A unit's slice is padded by under kAlign elements, each costing 16 B on the rank (fp32
      // masters, moments, gradient shard) and, in the full buffers, 6 B on each of the world's
      // slices (bf16 weights, fp32 gradients): 16 + 6 world <= 20 world at world >= 2.
      const int64_t padding = int64_t(layout.units().size()) * ShardGeometry::kAlign * world * 20;
      EXPECT_GE(plan.total() - plan.buffers, general.total()) << kShardingStageNames.name(stage);
      EXPECT_LE(plan.total() - plan.buffers, general.total() + padding)
          << kShardingStageNames.name(stage) << " at " << world;
    }
}

}  // namespace
}  // namespace trainer::dist
