// The whole model: gradients against finite differences, a batch it can memorise, masks seen
// through the model, and the optimizer and schedule it trains with.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "grad_check.h"
#include "nn/adamw.h"
#include "nn/gpt.h"
#include "nn/kv_cache.h"
#include "nn/lr_schedule.h"
#include "runtime/error.h"

namespace trainer::nn {

namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 31;
  c.max_seq_len = 12;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

struct TinyBatch {
  int B = 2, T = 8;
  std::vector<int32_t> tokens, targets;
  TinyBatch() {
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back((i * 7 + 3) % 31);
      targets.push_back((i * 5 + 1) % 31);
    }
  }
  BatchView view() const { return {B, T, tokens.data(), targets.data(), nullptr, nullptr}; }
};

}  // namespace

TEST(Gpt, GradientsMatchFiniteDifferences) {
  GPT model(tiny_config(), 2, 8);
  model.init_weights(11);
  std::vector<float> params(model.params(), model.params() + model.layout().total());
  TinyBatch batch;
  auto loss = [&] {
    std::copy(params.begin(), params.end(), model.params());
    return model.forward(batch.view()).sum;
  };
  loss();
  model.zero_grads();
  model.backward(1.0f);
  std::vector<float> grads(model.grads(), model.grads() + model.layout().total());
  for (const ParamInfo& p : model.layout().params()) {
    std::vector<float> x(params.begin() + p.offset, params.begin() + p.offset + p.numel);
    std::vector<float> g(grads.begin() + p.offset, grads.begin() + p.offset + p.numel);
    auto sub_loss = [&] {
      std::copy(x.begin(), x.end(), params.begin() + p.offset);
      return loss();
    };
    // Coarse: float rounding of a ~50-nat loss limits whole-model differences. Each op is
    // checked strictly in ops_grad_test; the whole model strictly in the PyTorch parity test.
    testing::expect_gradient(p.name, x, g, sub_loss, 12, 2e-3f, 3e-2, 6e-4);
    std::copy(x.begin(), x.end(), params.begin() + p.offset);
  }
}

TEST(Gpt, HooksReportEveryGradientRangeOnceFromTheEnd) {
  GPT model(tiny_config(), 2, 8);
  model.init_weights(1);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  model.on_grads_ready = [&](int64_t b, int64_t e) { ranges.push_back({b, e}); };
  TinyBatch batch;
  model.forward(batch.view());
  model.backward(1.0f);
  ASSERT_EQ(ranges.size(), size_t(tiny_config().n_layer + 2));
  EXPECT_EQ(ranges.front().second, model.layout().total());
  EXPECT_EQ(ranges.back().first, 0);
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].second, ranges[i - 1].first);
}

TEST(Gpt, OverfitsOneBatch) {
  GPT model(tiny_config(), 2, 8);
  model.init_weights(3);
  AdamW opt(model.layout(), {.weight_decay = 0.0f}, 0, model.layout().total());
  TinyBatch batch;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    LossSum ls = model.forward(batch.view());
    if (step == 0) first = ls.sum / double(ls.count);
    last = ls.sum / double(ls.count);
    model.zero_grads();
    model.backward(1.0f / float(ls.count));
    opt.step(model.params(), model.grads(), 1e-2f, 1.0f);
  }
  EXPECT_GT(first, 3.0);  // about ln(31) at init
  EXPECT_LT(last, 0.05);
}

TEST(Gpt, PackedDocumentsDoNotSeeEachOther) {
  // Row = document A (5 tokens) then document B (3 tokens). With segments, B's losses equal
  // those of B alone at the start of a row; without, they differ.
  GPT model(tiny_config(), 1, 8);
  model.init_weights(5);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6, 7, 8}, seg = {0, 0, 0, 0, 0, 1, 1, 1};
  std::vector<int32_t> tgt_b = {-1, -1, -1, -1, -1, 9, 10, 11};
  double packed = model.forward({1, 8, tok.data(), tgt_b.data(), seg.data(), nullptr}).sum;
  double unmasked = model.forward({1, 8, tok.data(), tgt_b.data(), nullptr, nullptr}).sum;
  std::vector<int32_t> tok_alone = {6, 7, 8}, tgt_alone = {9, 10, 11};
  double alone = model.forward({1, 3, tok_alone.data(), tgt_alone.data(), nullptr, nullptr}).sum;
  EXPECT_NEAR(packed, alone, 1e-5);
  EXPECT_GT(std::abs(unmasked - alone), 1e-4);
}

TEST(Gpt, PaddingIsNeverCounted) {
  // A padded row gives the loss and gradients of the same row unpadded.
  GPT model(tiny_config(), 1, 8);
  model.init_weights(6);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 0, 0, 0}, tgt = {2, 3, 4, 5, 6, -1, -1, -1};
  std::vector<int32_t> len = {5};
  LossSum padded = model.forward({1, 8, tok.data(), tgt.data(), nullptr, len.data()});
  model.zero_grads();
  model.backward(1.0f);
  std::vector<float> g_padded(model.grads(), model.grads() + model.layout().total());
  LossSum plain = model.forward({1, 5, tok.data(), tgt.data(), nullptr, nullptr});
  model.zero_grads();
  model.backward(1.0f);
  EXPECT_EQ(padded.count, 5);
  EXPECT_NEAR(padded.sum, plain.sum, 1e-5);
  for (int64_t i = 0; i < model.layout().total(); ++i)
    ASSERT_NEAR(g_padded[i], model.grads()[i], 1e-6) << i;
}

TEST(Gpt, OutOfRangeTokenIsAClearError) {
  GPT model(tiny_config(), 1, 4);
  std::vector<int32_t> tok = {1, 2, 31, 4}, tgt = {1, 1, 1, 1};
  try {
    model.forward({1, 4, tok.data(), tgt.data(), nullptr, nullptr});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 31"), std::string::npos) << e.what();
  }
}

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  LrSchedule s{.max_lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 10, .total_steps = 110};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(9), 1.0f);
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6);
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  s.decay = LrSchedule::Decay::linear;
  EXPECT_NEAR(s.at(35), 0.775f, 1e-6);
  EXPECT_THROW(LrSchedule::parse_decay("cosin"), Error);
}

TEST(AdamW, MatchesTheClosedFormFirstStep) {
  // After one step from zero moments, the update is lr * g / (|g| + eps) (bias-corrected).
  ModelConfig c = tiny_config();
  ParamLayout layout(c);
  AdamW opt(layout, {.weight_decay = 0.5f}, 0, layout.total());
  std::vector<float> p(size_t(layout.total()), 1.0f), g(size_t(layout.total()), 0.25f);
  opt.step(p.data(), g.data(), 0.1f, 2.0f);
  const ParamInfo* w = layout.find("h.0.attn.c_attn.weight");
  const ParamInfo* b = layout.find("h.0.attn.c_attn.bias");
  EXPECT_NEAR(p[size_t(w->offset)], 1.0f * (1 - 0.1f * 0.5f) - 0.1f, 1e-6);  // decayed
  EXPECT_NEAR(p[size_t(b->offset)], 1.0f - 0.1f, 1e-6);                      // not decayed
  EXPECT_FLOAT_EQ(clip_scale(10.0, 1.0f), float(1.0 / (10.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_scale(0.5, 1.0f), 1.0f);
}

}  // namespace trainer::nn

namespace trainer::nn {

TEST(KvCache, MatchesTheFullForwardAtEveryPosition) {
  ModelConfig c{.vocab_size = 31, .max_seq_len = 12, .n_layer = 2, .n_head = 2, .n_embd = 16};
  GPT model(c, 1, 12);
  model.init_weights(9);
  std::vector<int32_t> tokens = {4, 8, 15, 16, 23, 30, 1, 2, 3, 5};
  const int T = int(tokens.size());
  model.forward({1, T, tokens.data(), nullptr, nullptr, nullptr});
  std::vector<float> full(model.logits(), model.logits() + T * c.vocab_size);
  KvCacheDecoder dec(model);
  for (int t = 0; t < T; ++t) {
    const float* step = dec.push(tokens[size_t(t)]);
    for (int v = 0; v < c.vocab_size; ++v)
      ASSERT_NEAR(step[v], full[size_t(t) * c.vocab_size + v], 1e-4) << "position " << t;
  }
  for (int t = T; t < 12; ++t) dec.push(1);
  EXPECT_THROW(dec.push(1), Error);
}

}  // namespace trainer::nn
