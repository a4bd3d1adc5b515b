// Multi-rank tests of the sharded stages (run with the other multi-rank tests at 1, 2 and 4
// ranks): every stage trains to DDP's parameters, also with Join and uneven micro-batch
// counts, activation checkpointing and bf16; `full` holds at most 1/N of DDP's model state
// plus its unit buffers; the geometry tiles the flat buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "common/arch_family.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "dist/join.h"
#include "dist/sharding.h"
#include "dist_test_util.h"
#include "runtime/buffer.h"

namespace trainer::dist {
namespace {

using testing::make_rows;
using testing::Rows;
using testing::world;

constexpr int T = 16, B = 2;
constexpr float kLr = 1e-3f, kMaxNorm = 1.0f;

// A model whose blocks outweigh its embedding, as in real models; Llama with grouped-query
// attention and an untied head; GPT-NeoX with half of each head rotary.
nn::ModelConfig deep_config(const std::string& arch = "gpt2") {
  nn::ModelConfig c = testing::small_config();
  c.n_layer = 4;
  c.arch = arch;
  if (trainer::testing::llama_like(arch)) {
    c.n_kv_head = 1;
    c.ffn_multiple_of = 32;
    c.tie_embeddings = false;
  }
  if (arch == "neox") c.rotary_pct = 0.5;  // tied, unlike Llama here
  return c;
}

// Micro-batches rank r gets at step s (0: it has joined).
using MicroSchedule = std::function<int(int step, int rank)>;

struct Trained {
  std::unique_ptr<nn::Transformer> model;
  std::unique_ptr<DataParallel> dp;
};

// `steps` steps the way the training loop takes them: exchange_counts, this rank's
// micro-batches, empty passes where the stage needs the same count everywhere, the global
// norm (a sum of the shards' squares when sharded), clipping and AdamW.
Trained train(ShardingStage stage, const MicroSchedule& micro, int steps,
              nn::Recompute recompute = nn::Recompute::none, DType compute = DType::f32,
              const std::string& arch = "gpt2", bool reshard_after_forward = true) {
  Communicator& c = world();
  nn::ExecConfig exec = testing::exec_for(B, T, recompute, compute);
  exec.own_params = stage == ShardingStage::none;
  Trained t;
  t.model = std::make_unique<nn::Transformer>(deep_config(arch), exec);
  ParallelConfig pc;
  pc.sharding = stage;
  pc.bucket_mb = 0.02;
  pc.reshard_after_forward = reshard_after_forward;
  t.dp = make_data_parallel(c, *t.model, pc);
  init_masters(*t.dp, *t.model, 7);
  for (int step = 0; step < steps; ++step) {
    const int mine = micro(step, c.rank());
    std::vector<Rows> rows;
    int64_t tokens = 0;
    for (int m = 0; m < mine; ++m) {
      rows.push_back(make_rows(uint64_t(step * 16 + m), c.rank() * B, B, T));
      tokens += rows.back().loss_tokens();
    }
    const StepCounts counts = exchange_counts(c, mine > 0, tokens, mine);
    t.dp->begin_step(t.dp->collective_backward() ? counts.max_micro_batches : mine);
    t.model->reset_loss();
    for (int m = 0; m < mine; ++m) {
      t.dp->begin_micro_batch();
      t.model->forward(rows[size_t(m)].view());
      t.model->backward(1.0f / float(counts.global_tokens));
    }
    if (t.dp->collective_backward())
      for (int64_t m = mine; m < counts.max_micro_batches; ++m) empty_pass(*t.model, *t.dp, true);
    t.dp->finish();
    t.dp->step(kLr, nn::clip_scale(grad_norm(c, *t.dp, *t.model, false), kMaxNorm));
  }
  return t;
}

// The largest difference between this rank's masters and the same elements of `ref`'s
// (relative to the largest reference value), over every rank. The attention key bias gets
// zero gradient in exact arithmetic and rounding-noise updates of +-lr (Note [Comparing after
// AdamW] in mpi_test.cpp): those elements are compared with an absolute bound instead.
double max_diff_to(DataParallel& dp, const nn::Model& model, const std::vector<float>& ref,
                   int steps) {
  const std::vector<float> mine = read_as_f32(model.context(), dp.masters());
  std::vector<bool> key_bias(ref.size(), false);
  const nn::ParamLayout& layout = model.layout();
  const int C = deep_config().n_embd;
  for (int l = 0; l < deep_config().n_layer; ++l) {
    if (!layout.has(layout.block_unit(l), nn::Role::qkv_b)) continue;  // Llama has no biases
    const int64_t kb = layout.get(layout.block_unit(l), nn::Role::qkv_b).offset + C;
    for (int64_t k = kb; k < kb + C; ++k) key_bias[size_t(k)] = true;
  }
  double diff = 0, scale = 0;
  for (const nn::FlatSlice& sl : dp.slices())
    for (int64_t g = sl.begin; g < sl.end; ++g) {
      const double a = mine[size_t(sl.local + g - sl.begin)], b = ref[size_t(g)];
      if (key_bias[size_t(g)]) {
        EXPECT_LE(std::fabs(a - b), 2.0 * steps * kLr) << "key bias " << g;
        continue;
      }
      diff = std::max(diff, std::fabs(a - b));
      scale = std::max(scale, std::fabs(b));
    }
  const double mine_pair[2] = {diff, scale};
  std::vector<double> all(size_t(2 * world().size()));
  world().all_gather_async(mine_pair, all.data(), 2, DType::f64).wait();
  diff = scale = 0;
  for (int r = 0; r < world().size(); ++r) {
    diff = std::max(diff, all[size_t(2 * r)]);
    scale = std::max(scale, all[size_t(2 * r + 1)]);
  }
  return scale > 0 ? diff / scale : diff;
}

// Every sharded stage of the stage table: a new stage is tested here by being listed there.
std::vector<ShardingStage> sharded_stages() {
  std::vector<ShardingStage> out;
  for (const auto& [stage, name] : kShardingStageNames.entries)
    if (stage_record(stage).sharded) out.push_back(stage);
  return out;
}
const std::vector<ShardingStage> kSharded = sharded_stages();

std::vector<float> ddp_params(const MicroSchedule& micro, int steps, nn::Recompute r, DType compute,
                              const std::string& arch = "gpt2") {
  Trained ref = train(ShardingStage::none, micro, steps, r, compute, arch);
  return read_as_f32(ref.model->context(), ref.dp->masters());
}

// 20 steps of two micro-batches: every stage ends with DDP's parameters (1e-5 relative), for
// every architecture, and full also with reshard_after_forward = false.
//
// Note [Sharded against DDP]
// Both run the same GEMMs (B rows per rank and micro-batch) on the same weights; only the sum of
// the ranks' and micro-batches' partial gradients is added in another order (a reduce-scatter
// per micro-batch or unit against local accumulation and an all-reduce), ~2^-24 of the partials
// against mpi_test's ~sqrt(K) 2^-24 from other GEMM shapes (K >= 64). AdamW amplifies it as
// there (Note [Comparing after AdamW]), so 1e-5, that test's worst observation, leaves ~10x. A
// lost micro-batch or rank moves updates by O(lr) a step: >= 1e-3.
TEST(Sharding, EveryStageMatchesDdp) {
  const MicroSchedule two = [](int, int) { return 2; };
  for (const std::string& arch : nn::architecture_names()) {
    const std::vector<float> ref = ddp_params(two, 20, nn::Recompute::none, DType::f32, arch);
    for (ShardingStage s : kSharded) {
      Trained t = train(s, two, 20, nn::Recompute::none, DType::f32, arch);
      EXPECT_LT(max_diff_to(*t.dp, *t.model, ref, 20), 1e-5)  // Note [Sharded against DDP]
          << kShardingStageNames.name(s) << " " << arch;
    }
    // full, keeping every unit gathered from its forward to the step's end.
    Trained kept =
        train(ShardingStage::full, two, 20, nn::Recompute::none, DType::f32, arch, false);
    EXPECT_LT(max_diff_to(*kept.dp, *kept.model, ref, 20), 1e-5)  // Note [Sharded against DDP]
        << "full, reshard_after_forward false, " << arch;
  }
}

// Join: the last rank runs out after 5 steps and another has one micro-batch where the others
// have two; with and without activation checkpointing, for every architecture. Every stage
// still ends with DDP's parameters.
TEST(Sharding, JoinAndUnevenMicroBatchesMatchDdp) {
  const int N = world().size();
  const MicroSchedule uneven = [N](int step, int rank) {
    if (N > 1 && rank == N - 1 && step >= 5) return 0;
    return rank == 0 && step % 3 == 1 ? 1 : 2;
  };
  for (const std::string& arch : nn::architecture_names())
    for (nn::Recompute r : {nn::Recompute::none, nn::Recompute::full}) {
      const std::vector<float> ref = ddp_params(uneven, 12, r, DType::f32, arch);
      for (ShardingStage s : kSharded) {
        Trained t = train(s, uneven, 12, r, DType::f32, arch);
        EXPECT_LT(max_diff_to(*t.dp, *t.model, ref, 12), 1e-5)  // Note [Sharded against DDP]
            << kShardingStageNames.name(s) << " recompute " << nn::kRecomputeNames.name(r) << " "
            << arch;
      }
    }
}

// bf16 compute: the gathered weights are the masters rounded, as DDP's working copy is, so the
// stages agree with DDP as closely as fp32 runs do, until a master that differs by rounding
// rounds to a neighbouring bf16 (2^-8 relative) and moves the activations after it by bf16
// ulps: hence 10x the fp32 bound. A lost micro-batch or rank is still >= 1e-3.
TEST(Sharding, Bf16MatchesDdp) {
  const MicroSchedule one = [](int, int) { return 1; };
  const std::vector<float> ref = ddp_params(one, 6, nn::Recompute::none, DType::bf16);
  for (ShardingStage s : kSharded) {
    Trained t = train(s, one, 6, nn::Recompute::none, DType::bf16);
    EXPECT_LT(max_diff_to(*t.dp, *t.model, ref, 6), 1e-4) << kShardingStageNames.name(s);
  }
}

// Model state per rank, measured as the bytes allocated: `full` on N ranks holds at most 1/N of
// DDP's, plus its unit buffers (the embedding and two other units' weights and gradients, and
// their reduce-scatter results) and the padding of each unit to a multiple of 16 N.
TEST(Sharding, FullHoldsAtMostOneNthOfDdpPlusUnitBuffers) {
  Communicator& c = world();
  const int N = c.size();
  // Returns the bytes measured; `held` gets what the DataParallel says it holds, which is the
  // plan on rank 0 (the plan is rank 0's, whose slices are never shorter than another's).
  auto measured = [&](ShardingStage stage, StateBytes* held) {
    nn::ExecConfig exec = testing::exec_for(B, T);
    exec.own_params = stage == ShardingStage::none;
    const size_t before = Buffer::live_bytes(Device::cpu);
    const MemoryUsage used_before = Buffer::usage(Device::cpu);
    nn::Transformer model(deep_config(), exec);
    const nn::Transformer::Memory own = model.memory();
    ParallelConfig pc;
    pc.sharding = stage;
    auto dp = make_data_parallel(c, model, pc);
    *held = dp->state_bytes();
    const StateBytes plan = planned_state_bytes(model.layout(), pc, N, DType::f32, DType::f32);
    if (c.rank() == 0) {
      EXPECT_EQ(held->total(), plan.total()) << kShardingStageNames.name(stage);
    }
    EXPECT_LE(held->total(), plan.total()) << kShardingStageNames.name(stage);
    // Each category of the memory report is exactly what its Buffers hold (Note [Memory
    // report]): the state as the DataParallel counts it, the model's activations (with its
    // inputs) and workspace as the model does.
    const MemoryUsage used = Buffer::usage(Device::cpu);
    auto delta = [&](MemoryUse u) { return used.live[size_t(u)] - used_before.live[size_t(u)]; };
    const std::string stage_name(kShardingStageNames.name(stage));
    EXPECT_EQ(delta(MemoryUse::weights), held->masters + held->working) << stage_name;
    EXPECT_EQ(delta(MemoryUse::gradients), held->grads) << stage_name;
    EXPECT_EQ(delta(MemoryUse::optimizer), held->optimizer) << stage_name;
    EXPECT_EQ(delta(MemoryUse::communication), held->buffers) << stage_name;
    EXPECT_EQ(delta(MemoryUse::activations), own.activations + own.inputs) << stage_name;
    EXPECT_EQ(delta(MemoryUse::workspace), own.workspace) << stage_name;
    // Everything allocated, less the model's activations, workspace and inputs.
    return int64_t(Buffer::live_bytes(Device::cpu) - before) -
           (own.activations + own.workspace + own.inputs);
  };
  StateBytes ddp_plan, full_plan;
  const int64_t ddp = measured(ShardingStage::none, &ddp_plan);
  const int64_t full = measured(ShardingStage::full, &full_plan);
  EXPECT_EQ(ddp, ddp_plan.total());
  EXPECT_EQ(full, full_plan.total());
  const nn::ParamLayout layout(deep_config());
  // Each unit is padded by under 16 N elements (under 16 in one rank's slice), each costing
  // 16 B: fp32 masters, two moments and the gradient shard, as DDP's elements do.
  const int64_t padding = int64_t(layout.units().size()) * 16 * N * 16;
  EXPECT_LE(full, ddp / N + full_plan.buffers + padding)
      << "full " << full << " B, DDP " << ddp << " B on " << N << " ranks";
  if (N > 1) {
    // The buffers: the embedding unit and two blocks, weights and gradients (2 x 27968 floats
    // at N = 2), and the slices received of the gradients: 273 KiB at N = 2, 246 KiB at 4; DDP
    // holds 16 B for each of 53440 parameters, 835 KiB, so its half is 1.5x the most they take.
    EXPECT_LT(full_plan.buffers, ddp / 2) << "the unit buffers are not small";
  }
}

TEST(ShardGeometry, SlicesTileEveryUnitAligned) {
  const nn::ParamLayout layout(deep_config());
  for (int world_size : {1, 2, 3, 4, 7}) {
    std::vector<int64_t> covered(size_t(layout.total()), 0);
    for (int r = 0; r < world_size; ++r) {
      const ShardGeometry g(layout, world_size, r);
      for (const nn::FlatSlice& s : g.slices()) {
        EXPECT_EQ(s.local % ShardGeometry::kAlign, 0);
        EXPECT_LE(s.local + s.size(), g.local_size());
        for (int64_t k = s.begin; k < s.end; ++k) ++covered[size_t(k)];
      }
    }
    for (int64_t k = 0; k < layout.total(); ++k)
      ASSERT_EQ(covered[size_t(k)], 1) << "element " << k << " at world " << world_size;
  }
}

}  // namespace
}  // namespace trainer::dist
