// `trainer plan`'s arithmetic under tensor parallelism, against the arithmetic written out here:
// the layout the project is built around, Llama-3 70B (L = 80, C = 8192, 64 heads, 8 key/value
// heads, F = 28672, V = 128256, untied head) on 256 GPUs, 8-way tensor parallel inside each node
// and ZeRO-3 over the 32 data-parallel ranks of each slice; and the same 256 GPUs as 8-way
// tensor x 4 pipeline stages x 8-way data parallel (docs/dist.md, "Pipeline parallelism").
#include <gtest/gtest.h>

#include "app/config.h"
#include "app/memory_plan.h"
#include "app/run_setup.h"
#include "dist/pipeline_schedule.h"
#include "nn/activation_plan.h"
#include "nn/param_layout.h"
#include "nn/pipeline_split.h"

namespace trainer::app {

namespace {

RunConfig llama_70b(int tensor, int pipeline = 1) {
  Config c;
  for (const char* o :
       {"model.arch=llama", "model.n_layer=80", "model.n_embd=8192", "model.n_head=64",
        "model.n_kv_head=8", "model.ffn_hidden=28672", "model.ffn_multiple_of=256",
        "model.vocab_size=128256", "model.max_seq_len=8192", "model.tie_embeddings=false",
        "model.rope_theta=500000", "data.seq_len=4096", "data.batch_size=1", "model.precision=bf16",
        "dist.grad_dtype=bf16", "model.activation_checkpointing=full", "dist.sharding=full"})
    c.apply_override(o);
  c.apply_override("dist.tensor_parallel=" + std::to_string(tensor));
  c.apply_override("dist.pipeline_parallel=" + std::to_string(pipeline));
  c.apply_override("train.grad_accum=16");
  return resolve_run(c);
}

TEST(MemoryPlan, TensorParallel70BLayout) {
  const int64_t C = 8192, Ckv = 1024, F = 28672, V = 128256, L = 80, T = 8, D = 32;
  const RunConfig rc = llama_70b(int(T));
  const nn::ParamLayout slice(rc.model);
  int64_t whole = 0, mine = 0;
  for (const nn::ParamInfo& p : slice.params()) {
    whole += p.full_numel();
    mine += p.numel;
  }
  // q, k, v and o; gate, up and down; two norms. The embedding and the head by vocabulary rows.
  const int64_t block = C * C + 2 * Ckv * C + C * C + 3 * F * C + 2 * C;
  EXPECT_EQ(whole, 2 * V * C + L * block + C);
  EXPECT_EQ(whole, 70553706496);  // Llama 3 70B's published count
  // Each rank's slice: 1/8 of every cut matrix, the norms whole (replicated).
  EXPECT_EQ(mine, (2 * V * C + L * (block - 2 * C)) / T + L * 2 * C + C);
  // Alignment only: each tensor starts at a multiple of 16 elements, so under 16 of padding each.
  EXPECT_LE(slice.total() - mine, 16 * int64_t(slice.params().size()));

  // ZeRO-3 over the data group: 4 B of fp32 masters and 8 B of AdamW moments per parameter
  // of the slice, over 32 ranks (each unit padded to a multiple of 16 x 32 elements).
  const MemoryPlan plan = plan_memory(rc, int(D));
  const double padding = 16.0 * D * double(L + 2);
  EXPECT_NEAR(double(plan.state.masters), 4.0 * double(slice.total()) / D, 4 * padding);
  EXPECT_NEAR(double(plan.state.optimizer), 8.0 * double(slice.total()) / D, 8 * padding);
  // 16 B per parameter in all (masters, moments, the fp32 gradient shard) over 256 ranks: 4.41
  // GB per GPU, the figure docs/dist.md gives for 70B at 256 ranks (4.375 GB at 70.0B).
  // The slice holds the norms whole (1.3M parameters of its 8.8 billion: 1.3e-4 more than 1/8)
  // and padding (under 16 elements a unit in a rank's slice, ~5e-6): 0.002 is 15x that.
  const double per_gpu = 16.0 * double(whole) / double(T * D);
  EXPECT_NEAR(double(plan.state.masters + plan.state.optimizer) + 4.0 * double(slice.total()) / D,
              per_gpu, 0.002 * per_gpu);

  // The activations per rank shrink with the degree where they are per head or hidden unit
  // (q/k/v, attention, the MLP, the logits), not the residual stream; never below 1/8.
  const MemoryPlan one = plan_memory(llama_70b(1), int(T * D));
  EXPECT_LT(plan.model.activations, one.model.activations);
  EXPECT_GT(plan.model.activations, one.model.activations / T);
}

TEST(MemoryPlan, PipelineParallel70BLayout) {
  const int64_t C = 8192, V = 128256, T = 8, P = 4, D = 8;
  RunConfig rc = llama_70b(int(T), int(P));
  const nn::ParamLayout whole(rc.model);  // every layer, one tensor rank's slice
  // Balanced by compute: a block costs 6 x 855,638,016 matmul parameters + 12 C x 8192
  // positions = 5.94 GFLOP per token, the head 6 V C = 6.30 (1.06 blocks), so the largest stage
  // has 21 layers (4 x 20 + 1.06 does not fit under 21 otherwise) and the last, with the head,
  // 19: the earliest such cut is 20, 20, 21, 19.
  const std::vector<double> flops = nn::stage_flops(rc.model, rc.pipeline_split, int(P));
  const std::vector<std::pair<int, int>> want = {{0, 20}, {20, 40}, {40, 61}, {61, 80}};
  EXPECT_EQ(rc.pipeline_split, want);
  EXPECT_NEAR(flops[3] / flops[0], (19 + 6.0 * V * C / 5.939e9) / 20, 1e-3);
  int64_t held = 0;
  for (int s = 0; s < P; ++s) {
    RunConfig r = rc;
    r.model.pipeline = nn::stage_slice(rc.pipeline_split, int(P), s);
    // 1F1B with 16 micro-batches: stage s holds P - s of them.
    r.exec.activation_slots = dist::max_in_flight(
        dist::pipeline_actions(dist::PipelineSchedule::one_f_one_b, int(P), s, 16, 1));
    EXPECT_EQ(r.exec.activation_slots, P - s);
    const nn::ParamLayout stage(r.model);
    int64_t mine = 0;
    for (const nn::ParamInfo& p : stage.params()) mine += p.numel;
    held += mine;
    // ZeRO-3 over the 8 data ranks: 16 B per parameter of the stage's slice, a block's slice
    // being 107.0M parameters (4.28 GB for 20 blocks; the first and last stages add the
    // embedding's or the head's 131.3M, 0.26 GB): 4.54, 4.28, 4.49 and 4.33 GB.
    const MemoryPlan plan = plan_memory(r, int(D));
    const double state =
        double(plan.state.masters + plan.state.optimizer) + 4.0 * double(stage.total()) / double(D);
    // The units' padding, under 16 elements each in a rank's slice: ~1e-6 of the state.
    EXPECT_NEAR(state, 16.0 * double(mine) / double(D), 0.001 * state);
    // 106.97e6 is a block's slice, 106,971,136, rounded (1e-5); the final norm adds 8192.
    const double blocks = r.model.held_layers().size(), ends = s == 0 || s == P - 1;
    EXPECT_NEAR(state, 2.0 * (blocks * 106.97e6 + ends * double(V) * C / T), 0.001 * state);
    // The activations: with full checkpointing a held micro-batch keeps the residual stream
    // (fp32) at each of the stage's layers and at its end (the last stage adds the final norm's
    // and the loss's statistics), once per micro-batch; one pass's scratch comes once.
    const nn::ActivationPlan acts(r.model, r.exec);
    const int64_t N = 4096, layers = int64_t(r.model.held_layers().size());
    if (s < P - 1) EXPECT_EQ(acts.slot_bytes(), (layers + 1) * N * C * 4);
    RunConfig one = r;
    one.exec.activation_slots = 1;
    EXPECT_EQ(plan.model.activations - plan_memory(one, int(D)).model.activations,
              (P - s - 1) * acts.slot_bytes());
  }
  int64_t mine = 0;
  for (const nn::ParamInfo& p : whole.params()) mine += p.numel;
  EXPECT_EQ(held, mine);  // every parameter on exactly one stage (the head is untied)
}

TEST(MemoryPlan, TensorParallelRefusesModelsThatDoNotCut) {
  Config c;
  c.apply_override("dist.tensor_parallel=5");  // the default model has 6 heads
  try {
    resolve_run(c);
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide model.n_head = 6"), std::string::npos)
        << e.what();
  }
}

}  // namespace

}  // namespace trainer::app
