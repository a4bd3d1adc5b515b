// LoRA adapters (nn/lora.h) against their oracle, the base model with the adapters merged into
// its weights: W + s B A computes what the adapted products do, so its loss is the adapted
// model's and its weight gradients G give the factors' by the chain rule (dB = s G A^T,
// dA = s B^T G), and every norm's gradient is its own.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/arch_family.h"
#include "grad_check.h"
#include "model_test_util.h"
#include "nn/dropout.h"
#include "nn/lora.h"
#include "nn/transformer.h"
#include "runtime/error.h"

namespace trainer::nn {

namespace {

using testing::exec_for;
using testing::host_grads;
using testing::host_params;
using testing::loss_of;

const std::vector<std::string> kAllTargets = {"q", "k", "v", "o", "gate", "up", "down"};

// A two-layer model of `arch` (Llama and Qwen2 with grouped key/value heads, Qwen3 with heads
// wider than n_embd / n_head) with rank-3 adapters on `targets`.
ModelConfig adapted(const std::string& arch, const std::vector<std::string>& targets) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 29;
  c.max_seq_len = 8;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.ffn_multiple_of = 16;
  c.tie_embeddings = false;
  if (arch == "qwen3") c.head_dim = 16;
  c.lora = {3, 6.0f, targets};
  return c;
}

// The same parameter's values in another layout's buffer.
void copy_param(const ParamInfo& from, const float* src, const ParamLayout& to, float* dst) {
  const ParamInfo* p = to.find(from.name);
  ASSERT_NE(p, nullptr) << from.name;
  std::copy_n(src + from.offset, from.numel, dst + p->offset);
}

// rel_err of got against want: |got - want| / |want|, the norms over the whole tensor.
double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    d += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return std::sqrt(d / n);
}

// `cfg`'s model with seed-7 weights and every B set away from zero (amplitude `b`), so that the
// adapters change what it computes. The phase is quadratic in the element's index: sin(i + c)
// over each column would make B of rank 2, whose null direction some token's h can come near,
// leaving a head of queries to its base term alone (Qwen3's head norm then amplifies it).
std::unique_ptr<Transformer> adapted_model(const ModelConfig& cfg, const ExecConfig& exec,
                                           float b = 0.05f) {
  auto model = std::make_unique<Transformer>(cfg, exec);
  model->init_weights(7);
  std::vector<float> p = host_params(*model);
  for (const ParamInfo& info : model->layout().params())
    if (info.name.ends_with("lora_B.weight"))
      for (int64_t i = 0; i < info.numel; ++i)
        p[size_t(info.offset + i)] = b * std::sin(0.7f * float(i * i + 1));
  std::copy(p.begin(), p.end(), model->params().as<float>());
  model->sync_working_params();
  return model;
}

}  // namespace

class LoraArch : public ::testing::TestWithParam<std::string> {};

// A new adapter's B is zero: it adds exact zeros, so the loss is the base's bit for bit.
TEST_P(LoraArch, AFreshAdapterChangesNothing) {
  const ModelConfig cfg = adapted(GetParam(), kAllTargets);
  Transformer lora(cfg, exec_for(2, 8)), base(cfg.base(), exec_for(2, 8));
  lora.init_weights(5);
  std::vector<float> p = host_params(lora), q(size_t(base.layout().total()));
  for (const ParamInfo& info : lora.layout().params())
    if (!is_adapter(info.role)) copy_param(info, p.data(), base.layout(), q.data());
  std::copy(q.begin(), q.end(), base.params().as<float>());
  base.sync_working_params();
  const testing::TinyBatch batch(29);
  EXPECT_EQ(loss_of(lora, batch.view()).sum, loss_of(base, batch.view()).sum);
}

// With every factor nonzero, against the merged model.
TEST_P(LoraArch, MatchesTheMergedModel) {
  const ModelConfig cfg = adapted(GetParam(), kAllTargets);
  const auto adapted_lora = adapted_model(cfg, exec_for(2, 8));
  Transformer& lora = *adapted_lora;
  Transformer merged(cfg.base(), exec_for(2, 8));
  const float* p = lora.params().as<float>();
  merge_adapters(lora.layout(), p, merged.layout(), merged.params().as<float>());
  merged.sync_working_params();

  const testing::TinyBatch batch(29);
  lora.zero_grads();
  merged.zero_grads();
  const double l_lora = loss_of(lora, batch.view()).sum,
               l_merged = loss_of(merged, batch.view()).sum;
  lora.backward(1.0f);
  merged.backward(1.0f);
  // fp32, the products summed in two orders (x W^T + s (x A^T) B^T against x (W + s B A)^T):
  // each output differs by a few float roundings (~1e-7 relative), the ~50-nat loss by far less
  // than 1e-5 of it.
  EXPECT_NEAR(l_lora, l_merged, 1e-5 * std::abs(l_merged));

  const std::vector<float> g = host_grads(lora), gm = host_grads(merged);
  const float s = cfg.lora.scale();
  // The same rounding in the gradients, each a sum over the 16 tokens: 1e-4 of a tensor's norm
  // is over 100x the difference of two fp32 orderings; a missing term is off by O(1).
  const double tol = 1e-4;
  // The base's own gradients: the frozen products' and the embedding's are not computed,
  // the norms' are the merged model's.
  for (const ParamInfo& info : merged.layout().params()) {
    const ParamInfo* mine = lora.layout().find(info.name);
    std::vector<double> got(g.begin() + mine->offset, g.begin() + mine->offset + info.numel);
    std::vector<double> want(gm.begin() + info.offset, gm.begin() + info.offset + info.numel);
    if (skips_weight_grad(cfg, info.role))
      EXPECT_EQ(got, std::vector<double>(got.size(), 0.0)) << info.name;
    else
      EXPECT_LT(rel_err(got, want), tol) << info.name;
  }
  for (const ParamInfo& a : lora.layout().params()) {
    if (!a.name.ends_with(".lora_A.weight")) continue;
    const std::string stem = a.name.substr(0, a.name.size() - 14);
    const ParamInfo& b = *lora.layout().find(stem + ".lora_B.weight");
    const ParamInfo& w = *merged.layout().find(stem + ".weight");
    const int64_t out = w.shape[0], in = w.shape[1], r = a.shape[0];
    std::vector<double> da(size_t(r * in)), db(size_t(out * r));  // the chain rule, in double
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        const double gw = gm[size_t(w.offset + o * in + i)];
        for (int64_t k = 0; k < r; ++k) {
          db[size_t(o * r + k)] += s * gw * p[a.offset + k * in + i];
          da[size_t(k * in + i)] += s * p[b.offset + o * r + k] * gw;
        }
      }
    EXPECT_LT(rel_err({g.begin() + a.offset, g.begin() + a.offset + a.numel}, da), tol) << a.name;
    EXPECT_LT(rel_err({g.begin() + b.offset, g.begin() + b.offset + b.numel}, db), tol) << b.name;
  }
}

// train.lora.dropout (Note [LoRA]): for a fixed batch key the loss is a smooth function of the
// weights, so the factors' gradients and the norms' (which reach them through the masked input
// gradient of each adapter, beside the base product's unmasked one) match central differences.
// B is 0.5 in amplitude, so that the adapters' share of each norm's gradient is large enough
// that a missing or misplaced mask fails. Tolerances as in model_test's whole-model check: fp32
// rounding of a ~50-nat loss over 2 eps (atol 6e-4 is 20x what it reaches), rtol 3e-2 for the
// eps^2 truncation.
TEST_P(LoraArch, AdapterDropoutGradientsMatchFiniteDifferences) {
  ModelConfig cfg = adapted(GetParam(), kAllTargets);
  cfg.dropout.adapter = 0.3f;
  const auto model = adapted_model(cfg, exec_for(2, 8), 0.5f);
  const testing::TinyBatch tiny(29);
  BatchView batch = tiny.view();
  batch.dropout_key = dropout_batch_key(7, 3, 1);
  std::vector<float> params = host_params(*model);
  auto loss = [&] {
    std::copy(params.begin(), params.end(), model->params().as<float>());
    model->sync_working_params();
    return loss_of(*model, batch).sum;
  };
  loss();
  model->zero_grads();
  model->backward(1.0f);
  const std::vector<float> grads = host_grads(*model);
  int checked = 0;
  for (const ParamInfo& p : model->layout().params()) {
    if (skips_weight_grad(cfg, p.role)) continue;
    std::vector<float> x(params.begin() + p.offset, params.begin() + p.offset + p.numel);
    const std::vector<float> g(grads.begin() + p.offset, grads.begin() + p.offset + p.numel);
    auto sub_loss = [&] {
      std::copy(x.begin(), x.end(), params.begin() + p.offset);
      return loss();
    };
    trainer::testing::expect_gradient(p.name, x, g, sub_loss, 12, 2e-3f, 3e-2, 6e-4);
    std::copy(x.begin(), x.end(), params.begin() + p.offset);
    ++checked;
  }
  EXPECT_GT(checked, 2 * 14);  // both layers' 14 factors, and the norms
}

// The adapters drop only under a batch key, and only their input: without a key the model
// computes what it computes without train.lora.dropout, bit for bit (eval, sample); with one it
// computes something else, the same again for the same key, and another for another key.
TEST_P(LoraArch, AdapterDropoutRunsOnlyUnderABatchKey) {
  ModelConfig cfg = adapted(GetParam(), kAllTargets);
  const auto plain = adapted_model(cfg, exec_for(2, 8));
  cfg.dropout.adapter = 0.3f;
  const auto dropping = adapted_model(cfg, exec_for(2, 8));
  const testing::TinyBatch tiny(29);
  BatchView batch = tiny.view();
  const double want = loss_of(*plain, batch).sum;
  EXPECT_EQ(loss_of(*dropping, batch).sum, want);
  batch.dropout_key = dropout_batch_key(1, 0, 0);
  EXPECT_EQ(loss_of(*plain, batch).sum, want);  // a key alone drops nothing
  const double dropped = loss_of(*dropping, batch).sum;
  EXPECT_NE(dropped, want);
  EXPECT_EQ(loss_of(*dropping, batch).sum, dropped);
  batch.dropout_key = dropout_batch_key(1, 0, 1);
  EXPECT_NE(loss_of(*dropping, batch).sum, dropped);
}

// Activation checkpointing draws the adapters' masks again in the rerun forward and in backward:
// the gradients are bit for bit those of keeping everything.
TEST_P(LoraArch, AdapterDropoutIsBitIdenticalUnderCheckpointing) {
  ModelConfig cfg = adapted(GetParam(), kAllTargets);
  cfg.dropout = {0.1f, 0.2f, 0.15f, 0.3f};
  const testing::TinyBatch tiny(29);
  BatchView batch = tiny.view();
  batch.dropout_key = dropout_batch_key(3, 2, 1);
  auto grads_under = [&](Recompute policy) {
    const auto model = adapted_model(cfg, exec_for(2, 8, DType::f32, policy));
    testing::forward_backward(*model, batch);
    return host_grads(*model);
  };
  const std::vector<float> want = grads_under(Recompute::none);
  EXPECT_TRUE(grads_under(Recompute::selective) == want);
  EXPECT_TRUE(grads_under(Recompute::full) == want);
}

// Each adapter draws a mask of its own (PEFT's lora_dropout is one module per adapted layer):
// the q, k and v adapters of one stacked product too, and each layer its own. A row-parallel
// product's input (o, down) is this rank's columns of the whole input, whose counters it takes;
// a column-parallel one's is every column, as one process's.
TEST(Lora, EachAdapterDrawsItsOwnMaskOverTheWholeInput) {
  ModelConfig cfg = adapted("llama", kAllTargets);
  cfg.dropout.adapter = 0.3f;
  cfg.vocab_size = 30;  // cut in two
  cfg.tensor = {2, 1, false};
  const ArchSpec spec = arch_spec(cfg);
  std::vector<float> x(size_t(4 * 8));
  const ConstTensor input = make_tensor(x.data(), DType::f32, {4, 8});
  std::set<uint64_t> keys;
  for (int layer : {0, 1}) {
    BlockTensors t;
    t.model = &cfg;
    t.products = &spec.block_matmuls;
    EXPECT_FALSE(adapter_dropout_mask(t, spec.adapters[0], input).on());  // not training
    t.adapter_drop = {0.3f,
                      dropout_site_key(dropout_batch_key(1, 2, 3), layer, DropSite::adapter_input)};
    for (const Adapter& ad : spec.adapters) {
      const DropoutMask mask = adapter_dropout_mask(t, ad, input);
      EXPECT_EQ(mask.p, 0.3f);
      keys.insert(mask.key);
      const bool row = std::string(ad.name) == "o" || std::string(ad.name) == "down";
      EXPECT_EQ(mask.first, row ? 8 : 0) << ad.name;        // rank 1 of 2, 8 columns each
      EXPECT_EQ(mask.row_stride, row ? 16 : 0) << ad.name;  // the whole input's rows
    }
  }
  EXPECT_EQ(keys.size(), 2 * kAllTargets.size());
}

INSTANTIATE_TEST_SUITE_P(Llamas, LoraArch, ::testing::Values("llama", "qwen2", "qwen3"));

// Adapters only on some products, each named once, on an architecture that has them.
TEST(Lora, TargetsAreCheckedByName) {
  EXPECT_NO_THROW(adapted("llama", {"v", "down"}).validate());
  EXPECT_THROW(adapted("llama", {"q", "qkv"}).validate(), UsageError);
  EXPECT_THROW(adapted("llama", {"q", "q"}).validate(), UsageError);
  EXPECT_THROW(adapted("llama", {}).validate(), UsageError);
  ModelConfig gpt2 = adapted("llama", {"q"});
  gpt2.arch = "gpt2";
  gpt2.n_kv_head = 0;
  EXPECT_THROW(gpt2.validate(), UsageError);
  ModelConfig wide = adapted("llama", {"q"});
  wide.lora.rank = 33;
  EXPECT_THROW(wide.validate(), UsageError);
  ModelConfig no_adapters = adapted("llama", {"q"});  // dropout on adapters there are not
  no_adapters.lora.rank = 0;
  no_adapters.dropout.adapter = 0.1f;
  EXPECT_THROW(no_adapters.validate(), UsageError);
  EXPECT_NO_THROW(adapted("llama", {"q"}).base().validate());
}

// Only the targets' factors are parameters, after each block's base parameters, PEFT's
// names without its prefix; A starts U(-1/sqrt(in), 1/sqrt(in)) and B at zero.
TEST(Lora, AdaptersAreTheTargetsParameters) {
  const ParamLayout layout(adapted("llama", {"k", "down"}));
  std::vector<std::string> names;
  for (const ParamInfo& p : layout.params())
    if (is_adapter(p.role)) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.layers.0.self_attn.k_proj.lora_A.weight",
                                             "model.layers.0.self_attn.k_proj.lora_B.weight",
                                             "model.layers.0.mlp.down_proj.lora_A.weight",
                                             "model.layers.0.mlp.down_proj.lora_B.weight",
                                             "model.layers.1.self_attn.k_proj.lora_A.weight",
                                             "model.layers.1.self_attn.k_proj.lora_B.weight",
                                             "model.layers.1.mlp.down_proj.lora_A.weight",
                                             "model.layers.1.mlp.down_proj.lora_B.weight"}));
  const ParamInfo& a = *layout.find("model.layers.0.mlp.down_proj.lora_A.weight");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, a.full_shape[1]}));
  std::vector<float> v(size_t(a.numel));
  init_param(a, 1, v.data());
  const float bound = 1.0f / std::sqrt(float(a.shape[1]));
  float lo = 0, hi = 0;
  for (float x : v) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GE(lo, -bound);
  EXPECT_LT(hi, bound);
  EXPECT_GT(hi - lo, bound);  // spread over the range, not one value
  EXPECT_EQ(peft_name(a.name), "base_model.model." + a.name);
  EXPECT_EQ(from_peft_name(peft_name(a.name)), a.name);
  EXPECT_THROW(from_peft_name("model.layers.0.mlp.down_proj.weight"), UsageError);
}

}  // namespace trainer::nn
