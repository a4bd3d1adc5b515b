// The profile of a whole training step: every scope names a kernel family, the MLP's second
// product counts to the products (not to the activations its name begins with), and the
// families add up to at most the step, with the recomputation's nested ops counted once.
#include <gtest/gtest.h>

#include <set>

#include "common/arch_family.h"
#include "model_test_util.h"
#include "nn/transformer.h"
#include "runtime/profile.h"

namespace trainer::nn {
namespace {

class ProfiledStep : public ::testing::TestWithParam<std::string> {};

TEST_P(ProfiledStep, FamiliesAddUpToTheStep) {
  ModelConfig c;
  c.arch = GetParam();
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  if (trainer::testing::llama_like(c.arch)) c.ffn_multiple_of = 16;
  Transformer model(c, testing::exec_for(2, 16, DType::f32, Recompute::full));
  model.init_weights(3);
  std::vector<int32_t> tokens(32), targets(32);
  for (int i = 0; i < 32; ++i) {
    tokens[size_t(i)] = (i * 7 + 1) % 64;
    targets[size_t(i)] = (i * 5 + 2) % 64;
  }
  const BatchView batch{2, 16, tokens.data(), targets.data(), nullptr, nullptr};
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

INSTANTIATE_TEST_SUITE_P(Architectures, ProfiledStep, ::testing::ValuesIn(architecture_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace trainer::nn
