// `trainer plan`'s arithmetic under tensor parallelism, against the arithmetic written out here:
// the layout the project is built around, Llama-3 70B (L = 80, C = 8192, 64 heads, 8 key/value
// heads, F = 28672, V = 128256, untied head) on 256 GPUs, 8-way tensor parallel inside each node
// and ZeRO-3 over the 32 data-parallel ranks of each slice. (Pipeline parallelism is a later
// issue; a rank's share of the model state is the same 1/256 either way.)
#include <gtest/gtest.h>

#include "app/config.h"
#include "app/memory_plan.h"
#include "app/run_setup.h"
#include "nn/param_layout.h"

namespace trainer::app {

namespace {

RunConfig llama_70b(int tensor) {
  Config c;
  for (const char* o :
       {"model.arch=llama", "model.n_layer=80", "model.n_embd=8192", "model.n_head=64",
        "model.n_kv_head=8", "model.ffn_hidden=28672", "model.ffn_multiple_of=256",
        "model.vocab_size=128256", "model.max_seq_len=8192", "model.tie_embeddings=false",
        "model.rope_theta=500000", "data.seq_len=4096", "data.batch_size=1", "model.precision=bf16",
        "dist.grad_dtype=bf16", "model.activation_checkpointing=full", "dist.sharding=full"})
    c.apply_override(o);
  c.apply_override("dist.tensor_parallel=" + std::to_string(tensor));
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
  EXPECT_LE(slice.total() - mine, 16 * int64_t(slice.params().size()));  // alignment only

  // ZeRO-3 over the data group: 4 B of fp32 masters and 8 B of AdamW moments per parameter
  // of the slice, over 32 ranks (each unit padded to a multiple of 16 x 32 elements).
  const MemoryPlan plan = plan_memory(rc, int(D));
  const double padding = 16.0 * D * double(L + 2);
  EXPECT_NEAR(double(plan.state.masters), 4.0 * double(slice.total()) / D, 4 * padding);
  EXPECT_NEAR(double(plan.state.optimizer), 8.0 * double(slice.total()) / D, 8 * padding);
  // 16 B per parameter in all (masters, moments, the fp32 gradient shard) over 256 ranks: 4.41
  // GB per GPU, the figure docs/dist.md gives for 70B at 256 ranks (4.375 GB at 70.0B).
  const double per_gpu = 16.0 * double(whole) / double(T * D);
  EXPECT_NEAR(double(plan.state.masters + plan.state.optimizer) + 4.0 * double(slice.total()) / D,
              per_gpu, 0.002 * per_gpu);

  // The activations per rank shrink with the degree where they are per head or hidden unit
  // (q/k/v, attention, the MLP, the logits), not the residual stream; never below 1/8.
  const MemoryPlan one = plan_memory(llama_70b(1), int(T * D));
  EXPECT_LT(plan.model.activations, one.model.activations);
  EXPECT_GT(plan.model.activations, one.model.activations / T);
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
