// Pipeline stages inside the model (Note [Pipeline stages]): a model cut into stages (and, for
// the interleaved schedule, chunks per stage), its residual stream and gradient carried from
// stage to stage by hand, against the whole model on the same micro-batches: the loss is the
// whole model's bit for bit, and so is every gradient a stage holds alone; a tied embedding's
// gradient is the sum of the first and last stages'. Also the layout's map to the whole
// model's buffer, the slots' memory, and the cut of the layers into stages.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/arch_family.h"
#include "model_test_util.h"
#include "nn/architecture.h"
#include "nn/pipeline_split.h"
#include "nn/transformer.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::nn {
namespace {

using testing::exec_for;

ModelConfig config_for(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 31;
  c.max_seq_len = 12;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 16;
  if (arch != "gpt2") c.tie_embeddings = false;
  if (trainer::testing::llama_like(arch)) c.ffn_multiple_of = 16;
  return c;
}

struct MicroBatch {
  int B = 2, T = 8;
  std::vector<int32_t> tokens, targets, segments;
  explicit MicroBatch(int m) {
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back((i * 7 + 3 + m) % 31);
      targets.push_back(i % 5 == 4 ? -1 : (i * 5 + 1 + 2 * m) % 31);
      segments.push_back(i / 5);  // packed documents: attention's mask travels with the batch
    }
  }
  BatchView view() const { return {B, T, tokens.data(), targets.data(), segments.data(), nullptr}; }
};

// Copies the selected slot's tensor `from` of one stage into `to` of another.
void carry(Model& src, const Tensor& from, Model& dst, const Tensor& to) {
  ASSERT_EQ(from.numel(), to.numel());
  const std::vector<float> host = read_as_f32(src.context(), from);
  copy(dst.context(), to.flat(0, to.numel()),
       make_tensor(host.data(), DType::f32, {int64_t(host.size())}));
}

class Stages : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// P = 2 stages of `chunks` chunks each over 4 layers, 3 micro-batches held at once.
TEST_P(Stages, AddUpToTheWholeModel) {
  const auto [arch, chunks] = GetParam();
  const ModelConfig whole_config = config_for(arch);
  const int P = 2, M = 3;
  const auto split = pipeline_split(whole_config, P, chunks, {});
  ExecConfig exec = exec_for(2, 8);
  Transformer whole(whole_config, exec);
  whole.init_weights(7);
  exec.activation_slots = M;
  std::vector<std::unique_ptr<Transformer>> stage;
  for (int s = 0; s < P; ++s) {
    ModelConfig c = whole_config;
    c.pipeline = stage_slice(split, P, s);
    stage.push_back(std::make_unique<Transformer>(c, exec));
    stage.back()->init_weights(7);  // by name: the whole model's values
    stage.back()->zero_grads();
    stage.back()->reset_loss();
  }
  whole.zero_grads();
  whole.reset_loss();
  std::vector<MicroBatch> batches;
  int64_t counted = 0;
  for (int m = 0; m < M; ++m) {
    batches.emplace_back(m);
    for (int32_t t : batches.back().targets) counted += t >= 0;
  }
  const float scale = 1.0f / float(counted);
  for (int m = 0; m < M; ++m) {  // one process: forward and backward per micro-batch
    whole.forward(batches[size_t(m)].view());
    whole.backward(scale);
  }
  // The stages: every micro-batch forward through virtual stages 0..PV-1, then backward.
  const int V = P * chunks;
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) {
      Transformer& s = *stage[size_t(v % P)];
      s.select_slot(m);
      if (v < P) s.load_batch(batches[size_t(m)].view());
      if (v > 0) {
        Transformer& prev = *stage[size_t((v - 1) % P)];
        prev.select_slot(m);
        carry(prev, prev.chunk_output((v - 1) / P), s, s.chunk_input(v / P));
        s.select_slot(m);
      }
      s.forward_chunk(v / P);
    }
  for (int m = 0; m < M; ++m)
    for (int v = V - 1; v >= 0; --v) {
      Transformer& s = *stage[size_t(v % P)];
      if (v < V - 1) {
        Transformer& next = *stage[size_t((v + 1) % P)];
        next.select_slot(m);
        carry(next, next.residual_grad(), s, [&] {
          s.select_slot(m);
          return s.residual_grad();
        }());
      }
      s.select_slot(m);
      s.backward_chunk(v / P, scale);
    }
  EXPECT_EQ(stage[P - 1]->read_step_scalars({}).loss_sum, whole.read_step_scalars({}).loss_sum);
  EXPECT_EQ(stage[0]->read_step_scalars({}).loss_sum, 0.0);

  const std::vector<float> want = read_as_f32(whole.context(), whole.grads());
  std::vector<float> embedding(size_t(whole.layout().get(0, Role::tok_embedding).numel), 0.0f);
  for (int s = 0; s < P; ++s) {
    const ParamLayout& layout = stage[size_t(s)]->layout();
    const std::vector<float> got =
        read_as_f32(stage[size_t(s)]->context(), stage[size_t(s)]->grads());
    for (const ParamInfo& p : layout.params()) {
      const ParamInfo* w = whole.layout().find(p.name);
      ASSERT_NE(w, nullptr) << p.name;
      ASSERT_EQ(p.numel, w->numel);
      if (p.role == Role::tok_embedding && whole_config.tie_embeddings) {
        for (int64_t i = 0; i < p.numel; ++i) embedding[size_t(i)] += got[size_t(p.offset + i)];
        continue;
      }
      if (p.unit == layout.embedding_unit() && !layout.config().pipeline.first) continue;
      // The blocks, the final unit and an untied embedding: one process's bits.
      EXPECT_EQ(std::memcmp(got.data() + p.offset, want.data() + w->offset,
                            size_t(p.numel) * sizeof(float)),
                0)
          << p.name << " on stage " << s;
    }
  }
  if (whole_config.tie_embeddings) {  // two partial sums added: reassociation, 1e-6 of the norm
    const ParamInfo& w = whole.layout().get(0, Role::tok_embedding);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < w.numel; ++i) {
      const double d = double(embedding[size_t(i)]) - want[size_t(w.offset + i)];
      diff += d * d;
      norm += double(want[size_t(w.offset + i)]) * want[size_t(w.offset + i)];
    }
    EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, Stages,
                         ::testing::Combine(::testing::ValuesIn(architecture_names()),
                                            ::testing::Values(1, 2)));

TEST(PipelineLayout, UnitsMapToTheWholeModelsBuffer) {
  ModelConfig c = config_for("gpt2");
  const ParamLayout whole(c);
  c.pipeline = stage_slice(pipeline_split(c, 2, 2, {}), 2, 1);  // layers 1 and 3, the head
  const ParamLayout stage(c);
  EXPECT_EQ(stage.embedding_unit(), 0);  // the tied head's copy
  EXPECT_EQ(stage.block_unit(0), -1);
  EXPECT_EQ(stage.block_unit(3), 2);
  EXPECT_EQ(stage.model_digest(), whole.digest());
  for (const ParamInfo& p : stage.params()) {
    const ParamInfo* w = whole.find(p.name);
    ASSERT_NE(w, nullptr);
    int runs = 0;
    stage.for_each_whole_range(p.offset, p.offset + p.numel, [&](int64_t b, int64_t e, int64_t at) {
      EXPECT_EQ(at, w->offset + (b - p.offset));
      EXPECT_EQ(e - b, p.numel);
      ++runs;
    });
    EXPECT_EQ(runs, 1) << p.name;
  }
  c.pipeline = stage_slice(pipeline_split(c, 2, 1, {}), 2, 0);  // the first stage: no head
  const ParamLayout first(c);
  EXPECT_EQ(first.final_unit(), -1);
  EXPECT_EQ(first.units().size(), 3u);  // the embedding and blocks 0 and 1
}

TEST(PipelineLayout, ActivationsArePlannedPerSlot) {
  ModelConfig c = config_for("gpt2");
  c.pipeline = stage_slice(pipeline_split(c, 2, 1, {}), 2, 0);
  ExecConfig e = exec_for(2, 8);
  const Transformer::Memory one = Transformer::planned_memory(c, e);
  e.activation_slots = 3;
  const Transformer::Memory three = Transformer::planned_memory(c, e);
  // What a micro-batch keeps, three times; one pass's scratch once (Note [Activation memory]).
  const ActivationPlan plan(c, e);
  EXPECT_EQ(three.activations, one.activations + 2 * plan.slot_bytes());
  EXPECT_LT(plan.slot_bytes(), one.activations);  // one pass's d_res, d_ln and scratch lie beyond
  Transformer model(c, e);
  EXPECT_EQ(model.memory().activations, three.activations);
  EXPECT_EQ(model.memory().inputs, three.inputs);
}

TEST(PipelineSplit, BalancedByComputeListedOrEqual) {
  ModelConfig c = config_for("gpt2");
  c.n_layer = 8;
  using Split = std::vector<std::pair<int, int>>;
  EXPECT_EQ(pipeline_split(c, 2, 1, {}), (Split{{0, 4}, {4, 8}}));  // a small head
  c.vocab_size = 4096;  // the head outweighs two blocks here: the last stage takes fewer
  const Split heavy = pipeline_split(c, 2, 1, {});
  // FLOPs per token: a block 6 x 12 C^2 + 12 C T = 20736, the head 6 V C = 393216 (19 blocks),
  // so the cut is 7 + 1 layers: the last stage at 20 blocks' worth, against 23 for 4 + 4.
  EXPECT_GT(heavy[0].second, 4);
  const std::vector<double> flops = stage_flops(c, heavy, 2);
  const std::vector<double> even = stage_flops(c, {{0, 4}, {4, 8}}, 2);
  EXPECT_LT(std::max(flops[0], flops[1]), std::max(even[0], even[1]));
  EXPECT_EQ(pipeline_split(c, 2, 1, {1, 7}), (Split{{0, 1}, {1, 8}}));
  EXPECT_EQ(pipeline_split(c, 2, 2, {}), (Split{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  const PipelineSlice s = stage_slice(pipeline_split(c, 2, 2, {}), 2, 1);
  EXPECT_EQ(s.chunks, (Split{{2, 4}, {6, 8}}));
  EXPECT_FALSE(s.first);
  EXPECT_TRUE(s.last);
  EXPECT_THROW(pipeline_split(c, 9, 1, {}), UsageError);         // more stages than layers
  EXPECT_THROW(pipeline_split(c, 2, 1, {3, 4}), UsageError);     // does not cover the model
  EXPECT_THROW(pipeline_split(c, 2, 1, {0, 8}), UsageError);     // an empty stage
  EXPECT_THROW(pipeline_split(c, 2, 1, {2, 3, 3}), UsageError);  // more stages than asked
  EXPECT_THROW(pipeline_split(c, 2, 3, {}), UsageError);         // 6 chunks of 8 layers
}

}  // namespace
}  // namespace trainer::nn
