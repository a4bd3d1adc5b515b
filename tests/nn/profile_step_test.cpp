// The profile of a whole training step: every scope names a kernel family, the MLP's second
// product counts to the products (not to the activations its name begins with), and the
// families add up to at most the step, with the recomputation's nested ops counted once.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/arch_family.h"
#include "common/op_env.h"
#include "model_test_util.h"
#include "nn/ops/dropout.h"
#include "nn/ops/residual.h"
#include "nn/transformer.h"
#include "runtime/profile.h"

namespace trainer::nn {
namespace {

class ProfiledStep : public ::testing::TestWithParam<std::string> {};

// A two-layer model of `arch` and a batch of 2 x 16 tokens for it.
ModelConfig tiny(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  if (trainer::testing::llama_like(c.arch)) c.ffn_multiple_of = 16;
  return c;
}
struct Tokens {
  std::vector<int32_t> tokens, targets;
  Tokens() {
    for (int i = 0; i < 32; ++i) {
      tokens.push_back((i * 7 + 1) % 64);
      targets.push_back((i * 5 + 2) % 64);
    }
  }
  BatchView view() const { return {2, 16, tokens.data(), targets.data(), nullptr, nullptr}; }
};

TEST_P(ProfiledStep, FamiliesAddUpToTheStep) {
  const ModelConfig c = tiny(GetParam());
  Transformer model(c, testing::exec_for(2, 16, DType::f32, Recompute::full));
  model.init_weights(3);
  const Tokens tokens;
  const BatchView batch = tokens.view();
  profile::set_enabled(true);
  profile::reset();
  Timer wall;
  testing::forward_backward(model, batch);
  const double wall_ms = wall.ms();
  profile::set_enabled(false);
  const std::set<std::string> families = {"gemm",     "attention", "norms",     "activations",
                                          "rope",     "loss",      "embedding", "optimizer",
                                          "residual", "cast",      "other"};
  double own = 0;
  std::set<std::string> names;
  for (const profile::Entry& e : profile::report()) {
    names.insert(e.name);
    EXPECT_TRUE(families.count(e.family)) << e.name << " counts to '" << e.family << "'";
    // Own time is the scope's time less its children's, which lie inside it with at least the
    // bookkeeping between the readings (tens of ns, against ~1e-15 ms of rounding); never above
    // the total either, but for the sums' rounding (1e-9 ms).
    EXPECT_GE(e.ms, 0) << e.name;
    EXPECT_LE(e.ms, e.total_ms + 1e-9) << e.name;
    if (e.name.find("linear") != std::string::npos || e.name.find("lm_head") == 0) {
      EXPECT_EQ(e.family, "gemm") << e.name;
    }
    own += e.ms;
  }
  EXPECT_TRUE(names.count("recompute"));        // full checkpointing nests a forward in backward
  if (!trainer::testing::llama_like(c.arch)) {  // a GELU MLP
    EXPECT_TRUE(names.count("gelu_linear_backward"));
  }
  // Own times are disjoint intervals inside the step (the bound is double rounding).
  EXPECT_LE(own, wall_ms + 1e-6);
  profile::reset();
}

// Note [Profile work]: every matrix product of a step reports its shape once, to the scope
// around it, so the products' FLOPs add up to the model's count for the tokens (6 per matmul
// parameter and token: forward, and both gradients), exactly: the CPU's attention tiles are
// sgemm's, not matmul's, and per_position counts them apart. Elementwise ops report traffic.
TEST_P(ProfiledStep, ProductsAddUpToTheModelsFlops) {
  const ModelConfig c = tiny(GetParam());
  Transformer model(c, testing::exec_for(2, 16));
  model.init_weights(3);
  const Tokens tokens;
  const BatchView batch = tokens.view();
  profile::set_enabled(true);
  profile::reset();
  testing::forward_backward(model, batch);
  profile::set_enabled(false);
  double flops = 0;
  for (const profile::Entry& e : profile::report()) {
    flops += e.flops();
    if (!e.products.empty()) EXPECT_EQ(e.family, "gemm") << e.name;
    if (e.family == "norms") EXPECT_GT(e.bytes, 0) << e.name;
  }
  EXPECT_EQ(flops, c.token_flops().fixed * 32);
  profile::reset();
}

// An elementwise op's traffic (Note [Profile work]): a tensor read once, one written twice (read
// for ownership first), one updated in place twice, not three times.
TEST(ProfiledOps, ReportTheirTraffic) {
  using trainer::testing::view;
  const int64_t n = 1000;
  std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 2.0f),
      out(static_cast<size_t>(n));
  std::vector<bf16> half(static_cast<size_t>(n));
  trainer::testing::OpEnv env;
  const Context& ctx = env.ctx;
  profile::set_enabled(true);
  profile::reset();
  residual_forward(ctx, view(out, {n}), view(a, {n}), view(b, {n}));
  dropout(ctx, view(a, {n}), view(a, {n}), {0.5f, 1, 0});
  dropout(ctx, view(half, {n}), view(b, {n}), {0.5f, 1, 0});
  profile::set_enabled(false);
  std::map<std::string, double> bytes;
  for (const profile::Entry& e : profile::report()) bytes[e.name] = e.bytes;
  EXPECT_EQ(bytes["residual_forward"], 16.0 * n);
  EXPECT_EQ(bytes["dropout"], 8.0 * n + (4.0 + 4.0) * n);  // in place; fp32 into bf16
  profile::reset();
}

INSTANTIATE_TEST_SUITE_P(Architectures, ProfiledStep, ::testing::ValuesIn(architecture_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace trainer::nn
