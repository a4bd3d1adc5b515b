// The whole model: gradients against finite differences, a batch it can memorise, masks seen
// through the model, and the optimizer and schedule it trains with.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <vector>

#include "common/arch_family.h"
#include "grad_check.h"
#include "model_test_util.h"
#include "nn/adamw.h"
#include "nn/dropout.h"
#include "nn/kv_cache.h"
#include "nn/lr_schedule.h"
#include "nn/transformer.h"
#include "runtime/error.h"

namespace trainer::nn {

namespace {

using testing::exec_for;
using testing::forward_backward;
using testing::loss_of;
using testing::TinyBatch;

// `c` as architecture `arch`: Llama with one key/value head (multi-query) and an untied head;
// Qwen2 likewise, with as many key/value heads as make 16 channels (its q/k/v biases run as
// one); Qwen3 with heads twice n_embd / n_head wide; GPT-NeoX with a quarter of each head
// rotary and an untied head.
ModelConfig with_arch(ModelConfig c, const std::string& arch) {
  c.arch = arch;
  if (trainer::testing::llama_like(arch)) {
    c.n_kv_head = arch == "qwen2" ? std::max(1, 16 / (c.n_embd / c.n_head)) : 1;
    c.ffn_multiple_of = 16;
    c.tie_embeddings = false;
  }
  if (arch == "qwen3") c.head_dim = 2 * c.n_embd / c.n_head;
  if (arch == "neox") {  // as Pythia
    c.rotary_pct = 0.25;
    c.tie_embeddings = false;
    c.gelu = GeluForm::erf;
  }
  return c;
}

ModelConfig tiny_config(const std::string& arch = "gpt2") {
  ModelConfig c;
  c.vocab_size = 31;
  c.max_seq_len = 12;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return with_arch(c, arch);
}

}  // namespace

// The whole model, for each architecture.
class EveryArch : public ::testing::TestWithParam<std::string> {};

namespace {

// Each parameter's gradient from backward against central differences of the loss, on `batch`.
void expect_model_gradients(const ModelConfig& config, const BatchView& batch) {
  Transformer model(config, exec_for(2, 8));
  model.init_weights(11);
  std::vector<float> params = testing::host_params(model);
  auto loss = [&] {
    std::copy(params.begin(), params.end(), model.params().as<float>());
    return loss_of(model, batch).sum;
  };
  loss();
  model.zero_grads();
  model.backward(1.0f);
  std::vector<float> grads = testing::host_grads(model);
  for (const ParamInfo& p : model.layout().params()) {
    std::vector<float> x(params.begin() + p.offset, params.begin() + p.offset + p.numel);
    std::vector<float> g(grads.begin() + p.offset, grads.begin() + p.offset + p.numel);
    auto sub_loss = [&] {
      std::copy(x.begin(), x.end(), params.begin() + p.offset);
      return loss();
    };
    // Coarse: float rounding of a ~50-nat loss limits whole-model differences (fp32 against
    // fp64 central differences of this model at eps 2e-3 differ by <= 3e-5: atol 6e-4 is 20x;
    // rtol 3e-2 covers the eps^2 truncation). Each op is checked strictly in ops_grad_test;
    // the whole model strictly in the PyTorch parity test.
    trainer::testing::expect_gradient(p.name, x, g, sub_loss, 12, 2e-3f, 3e-2, 6e-4);
    std::copy(x.begin(), x.end(), params.begin() + p.offset);
  }
}

// Dropout at every site (Note [Dropout]), at rates that leave most of the tiny model working.
constexpr DropoutRates kSomeDropout{0.1f, 0.2f, 0.15f};

}  // namespace

TEST_P(EveryArch, GradientsMatchFiniteDifferences) {
  expect_model_gradients(tiny_config(GetParam()), TinyBatch().view());
}

// With dropout the loss is a smooth function of the weights for a fixed mask: the micro-batch's
// key fixes every mask, in forward and in backward.
TEST_P(EveryArch, GradientsMatchFiniteDifferencesWithDropout) {
  ModelConfig c = tiny_config(GetParam());
  c.dropout = kSomeDropout;
  const TinyBatch tiny;
  BatchView batch = tiny.view();
  batch.dropout_key = dropout_batch_key(7, 3, 1);
  expect_model_gradients(c, batch);
}

// Dropout runs only where the batch carries a key (training): without one a model with dropout
// computes what the same weights without dropout do, bit for bit (eval, sample); with one it
// computes something else, and the same key computes it again.
TEST_P(EveryArch, DropoutRunsOnlyUnderABatchKey) {
  ModelConfig c = tiny_config(GetParam());
  Transformer plain(c, exec_for(2, 8));
  c.dropout = kSomeDropout;
  Transformer dropping(c, exec_for(2, 8));
  plain.init_weights(5);
  dropping.init_weights(5);
  const TinyBatch tiny;
  BatchView batch = tiny.view();
  const double want = loss_of(plain, batch).sum;
  EXPECT_EQ(loss_of(dropping, batch).sum, want);
  batch.dropout_key = dropout_batch_key(1, 0, 0);
  const double dropped = loss_of(dropping, batch).sum;
  EXPECT_NE(dropped, want);
  EXPECT_EQ(loss_of(dropping, batch).sum, dropped);
  batch.dropout_key = dropout_batch_key(1, 0, 1);  // another micro-batch of the step
  EXPECT_NE(loss_of(dropping, batch).sum, dropped);
}

TEST_P(EveryArch, HooksReportEveryGradientRangeOnceFromTheEnd) {
  Transformer model(tiny_config(GetParam()), exec_for(2, 8));
  model.init_weights(1);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  model.attach_grads_ready([&](int64_t b, int64_t e) { ranges.push_back({b, e}); });
  TinyBatch batch;
  model.forward(batch.view());
  model.backward(1.0f);
  ASSERT_EQ(ranges.size(), size_t(tiny_config(GetParam()).n_layer + 2));
  EXPECT_EQ(ranges.front().second, model.layout().total());
  EXPECT_EQ(ranges.back().first, 0);
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].second, ranges[i - 1].first);
}

TEST_P(EveryArch, OverfitsOneBatch) {
  Transformer model(tiny_config(GetParam()), exec_for(2, 8));
  model.init_weights(3);
  AdamW opt(model.layout(), {.weight_decay = 0.0f}, {{0, model.layout().total(), 0}});
  TinyBatch batch;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const testing::LossSum ls = forward_backward(model, batch.view());
    if (step == 0) first = ls.sum / double(ls.count);
    last = ls.sum / double(ls.count);
    opt.step(model.context(), model.params(), model.grads(), model.working_copy(), 1e-2f, 1.0f);
  }
  EXPECT_GT(first, 3.0);  // about ln(31) at init
  EXPECT_LT(last, 0.05);  // a learning threshold, not a rounding bound
}

TEST_P(EveryArch, PackedDocumentsDoNotSeeEachOther) {
  // Row = document A (5 tokens) then document B (3 tokens). With segments, B's losses equal
  // those of B alone at the start of a row; without, they differ.
  Transformer model(tiny_config(GetParam()), exec_for(1, 8));
  model.init_weights(5);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6, 7, 8}, seg = {0, 0, 0, 0, 0, 1, 1, 1};
  std::vector<int32_t> tgt_b = {-1, -1, -1, -1, -1, 9, 10, 11};
  double packed = loss_of(model, {1, 8, tok.data(), tgt_b.data(), seg.data(), nullptr}).sum;
  double unmasked = loss_of(model, {1, 8, tok.data(), tgt_b.data(), nullptr, nullptr}).sum;
  std::vector<int32_t> tok_alone = {6, 7, 8}, tgt_alone = {9, 10, 11};
  double alone = loss_of(model, {1, 3, tok_alone.data(), tgt_alone.data(), nullptr, nullptr}).sum;
  // Other GEMM shapes (8 rows against 3) may add in another order: ~2^-24 sqrt(4C) of logits of
  // ~0.1 over 3 tokens, ~1e-7; attending to document A moves the loss by far more than 1e-4.
  EXPECT_NEAR(packed, alone, 1e-5);
  EXPECT_GT(std::abs(unmasked - alone), 1e-4);
}

TEST_P(EveryArch, PaddingIsNeverCounted) {
  // A padded row gives the loss and gradients of the same row unpadded.
  Transformer model(tiny_config(GetParam()), exec_for(1, 8));
  model.init_weights(6);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 0, 0, 0}, tgt = {2, 3, 4, 5, 6, -1, -1, -1};
  std::vector<int32_t> len = {5};
  model.zero_grads();
  const testing::LossSum padded =
      loss_of(model, {1, 8, tok.data(), tgt.data(), nullptr, len.data()});
  model.backward(1.0f);
  std::vector<float> g_padded = testing::host_grads(model);
  model.zero_grads();
  const testing::LossSum plain = loss_of(model, {1, 5, tok.data(), tgt.data(), nullptr, nullptr});
  model.backward(1.0f);
  EXPECT_EQ(padded.count, 5);
  EXPECT_NEAR(padded.sum, plain.sum, 1e-5);  // a ~17-nat sum; rounding ~1e-7, as above
  const std::vector<float> g_plain = testing::host_grads(model);
  // GEMMs of 8 rows against 5 (oneDNN may block them apart; the padded rows add exact zeros):
  // fp32 sums of depth <= 4C = 64 in another order, ~sqrt(64) 2^-24 = 5e-7 of the largest
  // gradient, through two blocks; bound 1e-5 of it. NaN or garbage leaking from the padded rows
  // is O(1).
  double scale = 0;
  for (float g : g_plain) scale = std::max(scale, double(std::fabs(g)));
  for (size_t i = 0; i < g_plain.size(); ++i)
    ASSERT_NEAR(g_padded[i], g_plain[i], 1e-5 * scale) << i;
}

TEST_P(EveryArch, MaskedTargetsContributeNothing) {
  // Instruction data masks its prompt's targets (-1). The gradient of a row whose first half is
  // masked equals the sum of the gradients of its response positions taken one at a time: a
  // masked position that leaked anything into the gradient would add it once to the first
  // and four times to the second.
  Transformer model(tiny_config(GetParam()), exec_for(1, 8));
  model.init_weights(7);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6, 7, 8}, tgt = {-1, -1, -1, -1, 6, 7, 8, 9};
  model.zero_grads();
  EXPECT_EQ(loss_of(model, {1, 8, tok.data(), tgt.data(), nullptr, nullptr}).count, 4);
  model.backward(1.0f);
  const std::vector<float> g_masked = testing::host_grads(model);
  model.zero_grads();
  for (int p = 4; p < 8; ++p) {
    std::vector<int32_t> one(8, -1);
    one[size_t(p)] = tgt[size_t(p)];
    loss_of(model, {1, 8, tok.data(), one.data(), nullptr, nullptr});
    model.backward(1.0f);  // adds to the gradients
  }
  const std::vector<float> g_sum = testing::host_grads(model);
  // The same four per-position terms, summed in another order (within a GEMM, or across four
  // backward passes): ~4 roundings of 2^-24 relative to the largest gradient; 1e-5 of it
  // leaves 40x room, and a leaked term is O(1) of it.
  double scale = 0;
  for (float g : g_masked) scale = std::max(scale, double(std::fabs(g)));
  ASSERT_GT(scale, 0);
  for (size_t i = 0; i < g_masked.size(); ++i)
    ASSERT_NEAR(g_masked[i], g_sum[i], 1e-5 * scale) << i;
}

TEST_P(EveryArch, OutOfRangeTokenIsAClearError) {
  Transformer model(tiny_config(GetParam()), exec_for(1, 4));
  std::vector<int32_t> tok = {1, 2, 31, 4}, tgt = {1, 1, 1, 1};
  try {
    model.forward({1, 4, tok.data(), tgt.data(), nullptr, nullptr});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 31"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, EveryArch, ::testing::ValuesIn(architecture_names()),
                         [](const auto& info) { return info.param; });

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  LrSchedule s{.max_lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 10, .total_steps = 110};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(9), 1.0f);
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6);  // computed in double, rounded to float: 1 ulp = 6e-8
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  s.decay = LrSchedule::Decay::linear;
  EXPECT_NEAR(s.at(35), 0.775f, 1e-6);  // as at(60)
  EXPECT_THROW(kDecayNames.parse("cosin"), Error);
}

// Note [WSD]: the peak until the last decay_steps, then each shape's closed form; a constant
// schedule's rates up to the decay's start, so a cooldown can branch off it.
TEST(LrSchedule, WarmupStableDecayHoldsThePeakThenDecaysOverItsLastSteps) {
  const LrSchedule constant{.max_lr = 1.0f,
                            .min_lr = 0.1f,
                            .warmup_steps = 10,
                            .total_steps = 1000,
                            .decay = LrSchedule::Decay::constant};
  LrSchedule s{.max_lr = 1.0f,
               .min_lr = 0.1f,
               .warmup_steps = 10,
               .total_steps = 120,
               .decay_steps = 20,
               .decay = LrSchedule::Decay::one_minus_sqrt};
  EXPECT_EQ(s.decay_start(), 100);
  for (int64_t step = 0; step < 100; ++step) EXPECT_EQ(s.at(step), constant.at(step)) << step;
  // 1e-6: each is computed in double and rounded to float once (1 ulp at 1 is 6e-8).
  EXPECT_NEAR(s.at(105), 0.1 + 0.9 * (1 - std::sqrt(0.25)), 1e-6);
  s.decay = LrSchedule::Decay::linear;
  EXPECT_NEAR(s.at(105), 0.1 + 0.9 * 0.75, 1e-6);
  s.decay = LrSchedule::Decay::cosine;
  EXPECT_NEAR(s.at(110), 0.55, 1e-6);
  EXPECT_EQ(s.describe(),
            "warmup to 1 over steps 1-10, 1 over steps 11-100, cosine decay to 0.1 over steps "
            "101-120");
  s.decay_steps = 111;  // does not fit after warmup
  EXPECT_THROW(s.validate(), UsageError);
  s.decay_steps = 20;
  s.decay = LrSchedule::Decay::constant;  // decays nothing
  EXPECT_THROW(s.validate(), UsageError);
  EXPECT_EQ(kDecayNames.parse("1-sqrt"), LrSchedule::Decay::one_minus_sqrt);
}

TEST(AdamW, MatchesTheClosedFormFirstStep) {
  // After one step from zero moments, the update is lr * g / (|g| + eps) (bias-corrected).
  ModelConfig c = tiny_config();
  ParamLayout layout(c);
  AdamW opt(layout, {.weight_decay = 0.5f}, {{0, layout.total(), 0}});
  std::vector<float> p(size_t(layout.total()), 1.0f), g(size_t(layout.total()), 0.25f);
  const int64_t n = layout.total();
  opt.step(Context{}, make_tensor(p.data(), DType::f32, {n}),
           make_tensor(g.data(), DType::f32, {n}), Tensor{}, 0.1f, 2.0f);
  const ParamInfo* w = layout.find("h.0.attn.c_attn.weight");
  const ParamInfo* b = layout.find("h.0.attn.c_attn.bias");
  // A few fp32 roundings (with or without FMA contraction) of ~0.9, 6e-8 each, and eps's 2e-9.
  EXPECT_NEAR(p[size_t(w->offset)], 1.0f * (1 - 0.1f * 0.5f) - 0.1f, 1e-6);  // decayed
  EXPECT_NEAR(p[size_t(b->offset)], 1.0f - 0.1f, 1e-6);                      // not decayed
  EXPECT_FLOAT_EQ(clip_scale(10.0, 1.0f), float(1.0 / (10.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_scale(0.5, 1.0f), 1.0f);
}

}  // namespace trainer::nn

namespace trainer::nn {

TEST_P(EveryArch, KvCacheMatchesTheFullForwardAtEveryPosition) {
  const ModelConfig c = tiny_config(GetParam());
  Transformer model(c, exec_for(1, 12));
  model.init_weights(9);
  std::vector<int32_t> tokens = {4, 8, 15, 16, 23, 30, 1, 2, 3, 5};
  const int T = int(tokens.size());
  model.forward({1, T, tokens.data(), nullptr, nullptr, nullptr});
  std::vector<float> full = read_as_f32(model.context(), model.logits());
  ExecConfig one = exec_for(1, 1);
  one.training = false;
  Transformer decoder(c, one);
  copy(decoder.context(), decoder.params(), model.params());
  decoder.sync_working_params();
  KvCacheDecoder dec(decoder);
  for (int t = 0; t < T; ++t) {
    const float* step = dec.push(tokens[size_t(t)]);
    // One row's GEMMs (oneDNN's small-M path) against ten rows': fp32 sums of depth <= 4C = 64
    // in another order, ~1e-7 on logits of ~0.1 at init; a wrong position or a missing cache
    // entry moves them by O(the logits).
    for (int v = 0; v < c.vocab_size; ++v)
      ASSERT_NEAR(step[v], full[size_t(t) * c.vocab_size + v], 1e-4) << "position " << t;
  }
  for (int t = T; t < 12; ++t) dec.push(1);
  EXPECT_THROW(dec.push(1), Error);
}

}  // namespace trainer::nn

namespace trainer::nn {

namespace {

// A batch in one of the three shapes the data layer produces: plain rows, packed documents
// (segment ids) or padded rows (lengths).
struct MaskedBatch {
  static constexpr int B = 2, T = 8;
  std::vector<int32_t> tokens, targets, segments, lengths;
  explicit MaskedBatch(int kind) {
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back((i * 7 + 3) % 31);
      targets.push_back((i * 5 + 1) % 31);
    }
    if (kind == 1)
      for (int i = 0; i < B * T; ++i) segments.push_back(i % T < 3 ? 0 : 1);
    if (kind == 2) {
      lengths = {8, 5};
      for (int t = 5; t < T; ++t) targets[size_t(T + t)] = -1;
    }
  }
  BatchView view() const {
    return {B,
            T,
            tokens.data(),
            targets.data(),
            segments.empty() ? nullptr : segments.data(),
            lengths.empty() ? nullptr : lengths.data()};
  }
};

struct Backward {
  std::vector<float> grads;
  double loss;
  std::vector<std::pair<int64_t, int64_t>> ready;  // the grads-ready hook, in order
  std::vector<std::pair<int, ParamUse>> needed;    // the params-needed hook, in order
};

Backward run_backward(ExecConfig exec, const BatchView& batch, const std::string& arch = "gpt2",
                      DropoutRates dropout = {}) {
  ModelConfig c = tiny_config(arch);
  c.dropout = dropout;
  Transformer model(c, exec);
  model.init_weights(17);
  Backward out;
  model.attach_grads_ready([&](int64_t b, int64_t e) { out.ready.push_back({b, e}); });
  model.attach_params_needed([&](int u, ParamUse use) { out.needed.push_back({u, use}); });
  out.loss = forward_backward(model, batch).sum;
  out.grads = testing::host_grads(model);
  return out;
}

}  // namespace

// Activation checkpointing recomputes with the same kernels in the same order, so gradients
// are bit for bit those of keeping everything, in every mask mode, with dropout too (a rerun
// block draws its masks again), and the hooks fire in the same order (DDP's buckets start at
// the same points).
class Checkpointing : public ::testing::TestWithParam<std::tuple<Recompute, int, std::string>> {};

TEST_P(Checkpointing, GradientsAreBitIdenticalToKeepingEverything) {
  const auto [policy, mask, arch] = GetParam();
  const MaskedBatch masked(mask);
  for (const DropoutRates dropout : {DropoutRates{}, DropoutRates{0.1f, 0.2f, 0.15f}}) {
    BatchView batch = masked.view();
    if (dropout.any()) batch.dropout_key = dropout_batch_key(3, 2, 1);
    const Backward want = run_backward(exec_for(2, 8), batch, arch, dropout);
    for (std::vector<int> layers : {std::vector<int>{}, std::vector<int>{1}}) {
      ExecConfig e = exec_for(2, 8, DType::f32, policy);
      e.recompute_layers = layers;
      const Backward got = run_backward(e, batch, arch, dropout);
      const std::string what = fmt::format("layers {}, dropout {}", layers.size(), dropout.any());
      EXPECT_EQ(got.loss, want.loss) << what;
      EXPECT_TRUE(got.grads == want.grads) << "gradients differ: " << what;
      EXPECT_EQ(got.ready, want.ready);
      EXPECT_EQ(got.needed, want.needed);
    }
  }
}

std::string policy_and_mask(
    const ::testing::TestParamInfo<std::tuple<Recompute, int, std::string>>& info) {
  static const char* const kMasks[] = {"plain", "packed", "padded"};
  return std::string(kRecomputeNames.name(std::get<0>(info.param))) + "_" +
         kMasks[std::get<1>(info.param)] + "_" + std::get<2>(info.param);
}

INSTANTIATE_TEST_SUITE_P(
    PoliciesAndMasks, Checkpointing,
    ::testing::Combine(::testing::Values(Recompute::selective, Recompute::full),
                       ::testing::Values(0, 1, 2), ::testing::ValuesIn(architecture_names())),
    policy_and_mask);

// The weight schedule the model publishes (sharding prefetches by it) is the order in which
// forward and backward, with full checkpointing, ask for the units' weights: tied and untied.
TEST_P(EveryArch, WeightScheduleIsTheOrderWeightsAreRead) {
  const MaskedBatch batch(0);
  for (bool tied : {true, false}) {
    ModelConfig c = tiny_config(GetParam());
    c.tie_embeddings = tied;
    try {
      c.validate();
    } catch (const UsageError&) {
      continue;  // GPT-2 is always tied
    }
    Transformer model(c, exec_for(2, 8, DType::f32, Recompute::full));
    model.init_weights(17);
    std::vector<int> read[2];
    model.attach_params_needed([&](int u, ParamUse use) { read[int(use)].push_back(u); });
    forward_backward(model, batch.view());
    EXPECT_EQ(read[0], model.weight_schedule(ParamUse::forward)) << "tied " << tied;
    EXPECT_EQ(read[1], model.weight_schedule(ParamUse::backward)) << "tied " << tied;
    EXPECT_EQ(read[0].size(), size_t(c.n_layer + 2 + tied));
  }
}

TEST(Checkpointing, ParamsNeededFiresBeforeEveryUnitInOrder) {
  const MaskedBatch batch(0);
  const Backward b = run_backward(exec_for(2, 8, DType::f32, Recompute::full), batch.view());
  // Forward: embedding, blocks 0..L-1, final, embedding again (tied head); backward: final,
  // embedding (tied head), blocks L-1..0.
  using P = std::pair<int, ParamUse>;
  const ParamUse f = ParamUse::forward, k = ParamUse::backward;
  const std::vector<P> want = {P{0, f}, P{1, f}, P{2, f}, P{3, f}, P{0, f},
                               P{3, k}, P{0, k}, P{2, k}, P{1, k}};
  EXPECT_EQ(b.needed, want);
  // An untied head (Llama here) reads its own weights in the final unit, not the embedding.
  const Backward u =
      run_backward(exec_for(2, 8, DType::f32, Recompute::full), batch.view(), "llama");
  const std::vector<P> untied = {P{0, f}, P{1, f}, P{2, f}, P{3, f}, P{3, k}, P{2, k}, P{1, k}};
  EXPECT_EQ(u.needed, untied);
}

TEST(Checkpointing, ActivationMemoryShrinksWithThePolicy) {
  const ModelConfig c = tiny_config();
  auto bytes = [&](Recompute r) {
    return ActivationPlan(c, exec_for(4, 12, DType::f32, r)).bytes();
  };
  // Plans are arithmetic, the same on every CPU. Here (2 blocks of C = 16, N = 48 tokens)
  // selective keeps each block's statistics and expensive activations (28.5 KiB) where full
  // keeps one shared copy: 28.5 KiB more; none keeps each block's cheap ones too, where
  // selective recomputes them into one shared copy: 18 KiB more.
  EXPECT_LT(bytes(Recompute::full), bytes(Recompute::selective));
  EXPECT_LT(bytes(Recompute::selective), bytes(Recompute::none));
  // bf16 halves what is stored in the compute dtype (82 KiB against 139 KiB here).
  EXPECT_LT(ActivationPlan(c, exec_for(4, 12, DType::bf16)).bytes(), bytes(Recompute::none));
}

// The plan `trainer plan` prints is what a model allocates, to the byte.
TEST_P(EveryArch, PlannedBytesAreWhatIsAllocated) {
  const ModelConfig c = with_arch(
      {.vocab_size = 97, .max_seq_len = 24, .n_layer = 3, .n_head = 2, .n_embd = 16}, GetParam());
  for (DType compute : {DType::f32, DType::bf16})
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
      for (bool training : {true, false}) {
        ExecConfig e = exec_for(3, 24, compute, r);
        e.training = training;
        if (compute == DType::bf16) e.grad = DType::bf16;
        const size_t before = Buffer::live_bytes(Device::cpu);
        const MemoryUsage used_before = Buffer::usage(Device::cpu);
        Transformer model(c, e);
        const int64_t allocated = int64_t(Buffer::live_bytes(Device::cpu) - before);
        const Transformer::Memory plan = Transformer::planned_memory(c, e);
        // And by category, as the memory report counts them (Note [Memory report]).
        const MemoryUsage used = Buffer::usage(Device::cpu);
        auto delta = [&](MemoryUse u) {
          return used.live[size_t(u)] - used_before.live[size_t(u)];
        };
        EXPECT_EQ(delta(MemoryUse::weights), plan.params + plan.working);
        EXPECT_EQ(delta(MemoryUse::gradients), plan.grads);
        EXPECT_EQ(delta(MemoryUse::activations), plan.activations + plan.inputs);
        EXPECT_EQ(delta(MemoryUse::workspace), plan.workspace);
        EXPECT_EQ(allocated, plan.total()) << float_dtype_name(compute) << " "
                                           << kRecomputeNames.name(r) << " training " << training;
        EXPECT_EQ(model.memory().activations, ActivationPlan(c, e).bytes());
        // A training step stays within the workspace it was given.
        if (training) {
          const MaskedBatch batch(1);
          forward_backward(model, batch.view());
          EXPECT_LE(model.context().workspace->peak(), size_t(plan.workspace));
        }
      }
}

TEST(Precision, Bf16StepTracksFp32) {
  // Ten steps of overfitting one batch: bf16 follows the fp32 loss curve closely.
  TinyBatch batch;
  auto losses = [&](DType compute, DType grad) {
    ExecConfig e = exec_for(2, 8, compute);
    e.grad = grad;
    Transformer model(tiny_config(), e);
    model.init_weights(3);
    AdamW opt(model.layout(), {}, {{0, model.layout().total(), 0}});
    std::vector<double> out;
    for (int step = 0; step < 10; ++step) {
      const testing::LossSum ls = forward_backward(model, batch.view());
      out.push_back(ls.sum / double(ls.count));
      testing::optimizer_step(model, opt, 1e-2f, 1.0f);
    }
    return out;
  };
  const std::vector<double> fp32 = losses(DType::f32, DType::f32);
  for (DType grad : {DType::f32, DType::bf16}) {
    const std::vector<double> bf16 = losses(DType::bf16, grad);
    // bf16 rounds matmul inputs and outputs (2^-9), on either path (native or via fp32): these
    // ten steps with that rounding emulated in PyTorch stay within 6e-4 relative; bound 2%.
    for (size_t i = 0; i < fp32.size(); ++i)
      EXPECT_NEAR(bf16[i], fp32[i], 0.02 * fp32[i]) << "step " << i;
    EXPECT_LT(bf16.back(), bf16.front() - 0.5);  // it learns
  }
}

}  // namespace trainer::nn
