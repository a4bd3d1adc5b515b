// Single-process units: bucket layout, DDP and Join over the single-process communicator,
// join-mode parsing and the start-up hash.
#include <gtest/gtest.h>

#include <cstring>

#include "dist/communicator.h"
#include "dist/consistency.h"
#include "dist/ddp.h"
#include "dist/join.h"
#include "dist_test_util.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace trainer::dist {
namespace {

TEST(Buckets, CutFromTheEndTowardsTheStart) {
  std::vector<Range> want = {{70, 100}, {40, 70}, {10, 40}, {0, 10}};
  EXPECT_EQ(plan_buckets(100, 30, {}), want);
  want = {{0, 100}};
  EXPECT_EQ(plan_buckets(100, 1000, {}), want);
}

TEST(Buckets, SkipFrozenRangesEvenWhenTheyOverlap) {
  std::vector<Range> want = {{70, 100}, {60, 70}, {10, 40}, {5, 10}};
  EXPECT_EQ(plan_buckets(100, 30, {{40, 50}, {45, 60}, {0, 5}}), want);
  want = {{0, 50}};
  EXPECT_EQ(plan_buckets(100, 60, {{50, 100}, {20, 20}}), want);
  EXPECT_TRUE(plan_buckets(100, 30, {{0, 100}}).empty());
  EXPECT_THROW(plan_buckets(100, 30, {{90, 110}}), Error);
  EXPECT_THROW(plan_buckets(100, 0, {}), Error);
}

TEST(Buckets, ModelBucketsCoverEveryParameterOnce) {
  nn::Transformer model(testing::small_config(), testing::exec_for(1, 16));
  auto comm = make_single_process_communicator();
  DDP ddp(*comm, model, {.bucket_mb = 0.01, .frozen = {}});
  const auto& b = ddp.buckets();
  // 0.01 MiB is 2621 fp32 gradients; the model has 28032 parameters (embeddings 2560, two
  // blocks of 12704, the final norm): 11 buckets.
  ASSERT_GE(b.size(), 4u);
  EXPECT_EQ(b.front().end, model.layout().total());
  EXPECT_EQ(b.back().begin, 0);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_EQ(b[i].end, b[i - 1].begin);
}

TEST(Ddp, SingleProcessLeavesGradientsAlone) {
  nn::Transformer model(testing::small_config(), testing::exec_for(2, 16));
  model.init_weights(1);
  auto comm = make_single_process_communicator();
  DDP ddp(*comm, model, {.bucket_mb = 0.01, .frozen = {}});
  testing::Rows rows = testing::make_rows(1, 0, 2, 16);
  model.zero_grads();
  model.forward(rows.view());
  model.backward(1.0f);
  const std::vector<float> before = testing::host_grads(model);
  ddp.finish();
  EXPECT_EQ(before, testing::host_grads(model));
  EXPECT_EQ(ddp.last_comm_seconds(), 0);
}

TEST(Join, SingleProcessCountsAndModes) {
  auto comm = make_single_process_communicator();
  StepCounts c = exchange_counts(*comm, true, 17);
  EXPECT_EQ(c.global_tokens, 17);
  EXPECT_TRUE(c.all_have_data());
  Join join(JoinMode::throw_error);
  EXPECT_EQ(join.decide(c, true, 0), StepAction::compute);
  c = exchange_counts(*comm, false, 0);
  EXPECT_TRUE(c.none_have_data());
  EXPECT_EQ(join.decide(c, false, 1), StepAction::stop);  // the end of the data, not an error
  EXPECT_EQ(kJoinModeNames.parse("true"), JoinMode::enabled);
  EXPECT_EQ(kJoinModeNames.parse("false"), JoinMode::disabled);
  EXPECT_THROW(kJoinModeNames.parse("True"), Error);
}

TEST(Consistency, HashIsStableAndSingleProcessPasses) {
  EXPECT_EQ(hash64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(hash64("a"), 0xaf63dc4c8601ec8cull);
  auto comm = make_single_process_communicator();
  EXPECT_NO_THROW(check_consistency(*comm, {{"x", "y"}}));
  EXPECT_EQ(first_difference("a:\n  b: 1\n  c: 2\n", "a:\n  b: 1\n  c: 3\n", 1),
            "at 'a.c': rank 0 has 'c: 2', rank 1 has 'c: 3'");
  EXPECT_EQ(first_difference("x\ny\n", "x\n", 2), "at line 2: rank 0 has 'y', rank 2 has nothing");
}

}  // namespace
}  // namespace trainer::dist
