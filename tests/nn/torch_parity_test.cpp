// The whole model against an independent PyTorch implementation (tests/nn/torch_reference.py):
// the trainer writes weights, a batch and its own results as safetensors; the script
// recomputes them in float64 and compares logits, loss, every parameter gradient and the losses
// of ten AdamW steps. Covers plain, packed (segment ids) and padded (row lengths) batches, for
// GPT-2, Llama (grouped-query attention, untied head; tied in the plain case) and GPT-NeoX
// (as Pythia: half of each head rotary, the exact GELU; untied head, tied in the plain case). The
// weights and gradients go to the script in Hugging Face's layout, as `trainer export` writes them
// (GPT-NeoX's q/k/v rows interleaved by head), so the script computes each model as Hugging Face
// does.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "common/arch_family.h"
#include "model_test_util.h"
#include "nn/adamw.h"
#include "nn/hf_config.h"
#include "nn/hf_weights.h"
#include "nn/model_io.h"
#include "nn/transformer.h"
#include "runtime/file_io.h"
#include "runtime/safetensors.h"

namespace trainer::nn {

namespace fs = std::filesystem;

namespace {

fs::path source_dir() {
  return TRAINER_SOURCE_DIR;
}
std::string python() {
  return TRAINER_PYTHON;
}

// Runs tests/nn/torch_reference.py with `args`; EXPECTs success and prints its report.
void run_reference(const std::string& args) {
  const std::string cmd = fmt::format(
      "{} {} {} 2>&1", python(), (source_dir() / "tests/nn/torch_reference.py").string(), args);
  std::FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string report;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) report += buf;
  int status = pclose(pipe);
  EXPECT_EQ(status, 0) << report;
  std::printf("%s", report.c_str());
}

// Writes the batch, runs `model` on it (logits; loss and gradients; ten AdamW steps with
// clipping), writes its results to `dir` and has the reference compare them.
void run_and_compare(Transformer& model, const ModelConfig& cfg, const BatchView& batch,
                     const fs::path& dir) {
  const int B = batch.B, T = batch.T;
  SafetensorsWriter inputs;
  inputs.add("tokens", DType::i32, {B, T}, batch.tokens);
  inputs.add("targets", DType::i32, {B, T}, batch.targets);
  if (batch.segments) inputs.add("segments", DType::i32, {B, T}, batch.segments);
  if (batch.lengths) inputs.add("lengths", DType::i32, {B}, batch.lengths);
  inputs.write(dir / "batch.safetensors");
  // Logits (forward without targets), then loss and gradients.
  BatchView no_targets = batch;
  no_targets.targets = nullptr;
  model.forward(no_targets);
  std::vector<float> logits = read_as_f32(model.context(), model.logits());
  const testing::LossSum ls = testing::forward_backward(model, batch);
  std::vector<float> grads = testing::host_grads(model);
  to_hf_order(model.layout(), grads.data());
  std::vector<float> loss = {float(ls.sum / double(ls.count))};

  // Ten AdamW steps with clipping, recording the loss before each.
  AdamW opt(model.layout(), {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
            {{0, model.layout().total(), 0}});
  std::vector<float> step_losses;
  for (int step = 0; step < 10; ++step) {
    const testing::LossSum s = testing::forward_backward(model, batch);
    step_losses.push_back(float(s.sum / double(s.count)));
    testing::optimizer_step(model, opt, 1e-3f, 1.0f);
  }

  SafetensorsWriter out;
  out.add("logits", DType::f32, {B, T, cfg.vocab_size}, logits.data());
  out.add("loss", DType::f32, {1}, loss.data());
  out.add("step_losses", DType::f32, {10}, step_losses.data());
  add_params(out, model.layout(), grads.data(), DType::f32, "grad.");
  out.write(dir / "trainer.safetensors");

  run_reference(dir.string());
  fs::remove_all(dir);
}

}  // namespace

class TorchParity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TorchParity, MatchesPyTorch) {
  const auto [arch, mode] = GetParam();
  ModelConfig cfg{.vocab_size = 67, .max_seq_len = 24, .n_layer = 2, .n_head = 4, .n_embd = 32};
  cfg.arch = arch;
  if (arch != "gpt2") {
    cfg.rope_theta = 500.0f;  // positions up to 20 turn even the slow pairs measurably
    cfg.tie_embeddings = mode == "plain";
  }
  if (trainer::testing::llama_like(arch)) {
    cfg.n_kv_head = 2;
    cfg.ffn_multiple_of = 16;
  }
  if (arch == "qwen3") cfg.head_dim = 16;  // twice n_embd / n_head
  if (arch == "neox") {                    // as Pythia: partial rotary, the exact GELU
    cfg.rotary_pct = 0.5;
    cfg.gelu = GeluForm::erf;
  }
  if (mode == "fields") {
    // A norm epsilon that moves every norm's output by percents (the stream's mean square is
    // about 0.1 to 1 here), and rotary scaling: Llama 3.1's with every band in use (head size
    // 8 at theta 500 has wavelengths 6.3, 30, 140 and 660 against 64 / 4 and 64), linear for
    // Qwen3, and YaRN for GPT-NeoX's half-head rotary (4 channels, 2 pairs: at theta 500 and an
    // original context of 16, beta_fast 4 and beta_slow 0.025 turns fall at pairs -0.15 and
    // 1.49, so pair 0 is kept and pair 1 ramped by 0.67, past position 16), with an attention
    // factor of its own.
    cfg.norm_eps = 0.05f;
    if (trainer::testing::llama_like(arch)) {
      cfg.rope_scaling = RopeScaling::llama3;
      cfg.rope_factor = 8.0f;
      cfg.rope_original_context = 64;
    }
    if (arch == "qwen3") {
      cfg.rope_scaling = RopeScaling::linear;
      cfg.rope_factor = 4.0f;
      cfg.rope_original_context = ModelConfig{}.rope_original_context;
    }
    if (arch == "neox") {
      cfg.rope_scaling = RopeScaling::yarn;
      cfg.rope_factor = 4.0f;
      cfg.rope_original_context = 16;
      cfg.rope_beta_fast = 4.0f;
      cfg.rope_beta_slow = 0.025f;
      cfg.rope_attention_factor = 1.3f;
      cfg.rope_truncate = false;
    }
  }
  const int B = 3, T = 20;
  Transformer model(cfg, testing::exec_for(B, T));
  model.init_weights(1234);
  // Larger-than-init weights make every gradient substantial. Qwen3's head norms stay at 1:
  // tripled, they would scale every attention score by 9, and near one-hot softmaxes make ten
  // steps chaotic enough that fp32 and float64 drift apart by 1e-3.
  for (const ParamInfo& p : model.layout().params())
    if (p.role != Role::q_norm_w && p.role != Role::k_norm_w)
      for (int64_t i = p.offset; i < p.offset + p.numel; ++i) model.params().as<float>()[i] *= 3.0f;

  std::vector<int32_t> tokens(B * T), targets(B * T), segments, lengths;
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 13 + 5) % cfg.vocab_size;
    targets[i] = (i * 29 + 3) % cfg.vocab_size;
  }
  if (mode == "packed") {
    for (int i = 0; i < B * T; ++i) segments.push_back((i % T) < 7 ? 0 : (i % T) < 15 ? 1 : 2);
    for (int i = 0; i < B * T; ++i)  // no prediction across a document end
      if (i % T == 6 || i % T == 14) targets[i] = -1;
  }
  if (mode == "padded") {
    lengths = {20, 13, 6};
    for (int r = 0; r < B; ++r)
      for (int t = lengths[r]; t < T; ++t) {
        tokens[r * T + t] = 0;
        targets[r * T + t] = -1;
      }
  }
  BatchView batch{B,
                  T,
                  tokens.data(),
                  targets.data(),
                  segments.empty() ? nullptr : segments.data(),
                  lengths.empty() ? nullptr : lengths.data()};

  const fs::path dir =
      fs::temp_directory_path() / fmt::format("trainer_torch_parity_{}_{}", arch, mode);
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::vector<float> hf = testing::host_params(model);
    to_hf_order(model.layout(), hf.data());
    SafetensorsWriter w;
    add_params(w, model.layout(), hf.data());
    w.write(dir / "weights.safetensors");
    // The model as `trainer export` describes it (less the dropout rates, which evaluation
    // never applies): the reference reads it as Hugging Face would.
    write_file_atomic(dir / "config.json", cfg.architecture().hf_config(cfg).dump(2));
  }
  run_and_compare(model, cfg, batch, dir);
}

INSTANTIATE_TEST_SUITE_P(
    Batches, TorchParity,
    ::testing::Combine(::testing::ValuesIn(architecture_names()),
                       ::testing::Values("plain", "packed", "padded", "fields")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// A Hugging Face folder written by the reference (random weights as Hugging Face lays them
// out: GPT-2's Conv1D matrices and prefixed names, Llama's grouped key/value heads, Llama
// 3.1's rotary scaling, Qwen2.5's config and q/k/v biases, Qwen3's head norms and head_dim,
// Mistral's config, Pythia's
// config (exact GELU, q/k/v by head, partial rotary), tied or untied heads; one file or shards;
// F32, BF16 or F16) read by the trainer alone (its
// config.json and weights), then run and compared as above against the folder's own values.
class HfFolderParity
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, int, bool>> {};

TEST_P(HfFolderParity, MatchesPyTorch) {
  const auto [arch, dtype, shards, tied] = GetParam();
  const fs::path dir = fs::temp_directory_path() /
                       fmt::format("trainer_hf_parity_{}_{}_{}_{}", arch, dtype, shards, tied);
  fs::remove_all(dir);
  fs::create_directories(dir);
  run_reference(
      fmt::format("make-hf {} {} {} {} {}", dir.string(), arch, dtype, shards, tied ? 1 : 0));
  const ModelConfig cfg = hf_model_config(dir / "hf/config.json");
  EXPECT_EQ(cfg.arch, arch == "llama3" || arch == "yarn" || arch == "mistral" ? "llama" : arch);
  if (arch == "llama3") {
    EXPECT_EQ(cfg.rope_scaling, RopeScaling::llama3);
    EXPECT_EQ(cfg.rope_original_context, 64);
    EXPECT_EQ(cfg.norm_eps, 0.05f);
  }
  if (arch == "yarn") {  // positions up to 19 against an original context of 16
    EXPECT_EQ(cfg.rope_scaling, RopeScaling::yarn);
    EXPECT_EQ(cfg.rope_original_context, 16);
    EXPECT_EQ(cfg.rope_factor, 4.0f);
    EXPECT_FALSE(cfg.rope_truncate);
    EXPECT_NEAR(cfg.rope().attention_factor, 0.1 * std::log(4.0) + 1, 1e-6);
  }
  EXPECT_EQ(cfg.tie_embeddings, tied);
  const int B = 3, T = 20;
  Transformer model(cfg, testing::exec_for(B, T));
  const HfWeights weights(dir / "hf", model.layout());
  EXPECT_EQ(dtype_name(weights.dtype()), dtype);
  for (const ParamInfo& p : model.layout().params())
    weights.read(p, 0, p.numel, model.params().as<float>() + p.offset);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 13 + 5) % cfg.vocab_size;
    targets[i] = (i * 29 + 3) % cfg.vocab_size;
  }
  run_and_compare(model, cfg, {B, T, tokens.data(), targets.data(), nullptr, nullptr}, dir);
}

INSTANTIATE_TEST_SUITE_P(
    Folders, HfFolderParity,
    ::testing::Values(std::tuple{"gpt2", "F32", 1, true}, std::tuple{"gpt2", "F16", 3, true},
                      std::tuple{"llama", "BF16", 1, false}, std::tuple{"llama", "F32", 4, false},
                      std::tuple{"llama", "F16", 2, true}, std::tuple{"llama3", "BF16", 1, true},
                      std::tuple{"yarn", "F32", 1, false}, std::tuple{"qwen2", "BF16", 2, true},
                      std::tuple{"qwen3", "BF16", 1, true}, std::tuple{"mistral", "F32", 1, false},
                      std::tuple{"neox", "F16", 2, false}, std::tuple{"neox", "F32", 1, true}),
    [](const auto& info) {
      return fmt::format("{}_{}_{}shards_{}", std::get<0>(info.param), std::get<1>(info.param),
                         std::get<2>(info.param), std::get<3>(info.param) ? "tied" : "untied");
    });

}  // namespace trainer::nn
