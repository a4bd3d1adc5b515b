// The training loop end to end on a synthetic corpus: exact resume in every data mode,
// checkpoint crash safety and validation, non-finite handling, freezing, and stop signals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/checkpoint.h"
#include "app/commands.h"
#include "app/run_setup.h"
#include "app/run_training.h"
#include "app/saved_model.h"
#include "app/source_weights.h"
#include "app_test_util.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/safetensors.h"

namespace trainer::app {

namespace fs = std::filesystem;

using testing::error_of;
using testing::metrics_without_timings;
using testing::poison_checkpoint;
using testing::spawn_trainer;
using testing::TempDir;
using testing::tiny_config;
using testing::train_tiny;
using testing::usage_error_of;

// Param: the data mode, optionally followed by "+bf16" (mixed precision, bf16 gradients),
// "+full" (full activation checkpointing) and "+schedules" (the global batch growing from 1 to
// 2 to 3 micro-batches and rows from 8 to 16 tokens, with the resume at step 5 between
// changes of both).
class ExactResume : public ::testing::TestWithParam<std::string> {};

TEST_P(ExactResume, StoppingAndResumingGivesBitIdenticalParametersAndMetrics) {
  const std::string param = GetParam();
  const std::string mode = param.substr(0, param.find('+'));
  TempDir dir("resume_" + mode);
  testing::write_corpus(dir.path / "data");
  Config straight = tiny_config(dir.path / "data", dir.path / "runs", "straight");
  straight.set("data.mode", mode);
  straight.apply_override("train.grad_accum=2");
  if (param.find("+bf16") != std::string::npos) {
    straight.apply_override("model.precision=bf16");
    straight.apply_override("dist.grad_dtype=bf16");
  }
  if (param.find("+full") != std::string::npos)
    straight.apply_override("model.activation_checkpointing=full");
  if (param.find("+schedules") != std::string::npos) {
    straight.apply_override("train.grad_accum_schedule=['0:1', '4:2', '7:3']");
    straight.apply_override("train.seq_len_schedule=['0:8', '3:12', '9:16']");
  }
  ASSERT_EQ(run_training(straight), 0);

  // The second run starts from the straight run's step-5 checkpoint, as if stopped there.
  Config resumed = straight;
  resumed.set("run.name", "resumed");
  resumed.set("train.resume", (dir.path / "runs/straight/checkpoints/step-5").string());
  ASSERT_EQ(run_training(resumed), 0);

  const fs::path a = dir.path / "runs/straight/checkpoints/step-12/model.safetensors";
  const fs::path b = dir.path / "runs/resumed/checkpoints/step-12/model.safetensors";
  EXPECT_EQ(read_file(a), read_file(b)) << "final parameters differ";
  auto ma = metrics_without_timings(dir.path / "runs/straight", 5);
  auto mb = metrics_without_timings(dir.path / "runs/resumed", 5);
  ASSERT_EQ(ma.size(), 7u + 2u);  // steps 6..12 and validations at 8 and 12
  EXPECT_EQ(ma, mb);
  EXPECT_LT(ma.back().value("val_loss", 99.0), 4.0);  // it learns (ln 64 = 4.16)
  if (param == "stream+schedules") {  // the schedules act: 3 micro-batches of 4 x 16 at the end
    int64_t at11 = -1, at12 = -1;
    for (const auto& m : ma) {
      if (m.value("step", 0) == 11 && m.contains("tokens")) at11 = m["tokens"];
      if (m.value("step", 0) == 12 && m.contains("tokens")) at12 = m["tokens"];
    }
    EXPECT_EQ(at12 - at11, 3 * 4 * 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ExactResume,
                         ::testing::Values("stream", "pack", "bucket", "stream+bf16+full",
                                           "pack+full", "stream+schedules", "pack+schedules"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '+', '_');
                           return n;
                         });

TEST(Checkpoint, CorruptedOrTruncatedFileIsNamed) {
  TempDir dir("corrupt");
  train_tiny(dir, {"train.steps=2", "checkpoint.every=1"});
  const fs::path ckpt = dir.path / "runs/r/checkpoints/step-2";
  {
    std::fstream f(ckpt / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);  // into the last tensor's data, which ends the file
    f.put('\x7f');
  }
  std::string e = error_of([&] { open_checkpoint(ckpt); });
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  const fs::path earlier = dir.path / "runs/r/checkpoints/step-1";
  fs::resize_file(earlier / "optimizer.safetensors", 100);  // far under 8 B a parameter of moments
  e = error_of([&] { open_checkpoint(earlier); });
  EXPECT_NE(e.find("optimizer.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(Checkpoint, AnotherModelIsAClearError) {
  TempDir dir("shape");
  Config c = train_tiny(dir, {"train.steps=2"});
  // Resuming with another model is refused by the key that changed, also where every tensor
  // keeps its shape (the head count).
  for (const char* change : {"model.n_embd=48", "model.n_head=4"}) {
    Config other = c;
    other.apply_override(change);
    other.apply_override("train.steps=4");
    const std::string e = usage_error_of([&] { run_training(other); });
    const std::string key = std::string(change).substr(0, std::string(change).find('='));
    EXPECT_EQ(e.find("cannot resume from"), 0u) << e;
    EXPECT_NE(e.find(key + " was"), std::string::npos) << e;
  }
  // Weights loaded into a model of another shape: the tensor and both shapes are named.
  const ModelSource source = open_model_source(dir.path / "runs/r", "r");
  nn::ModelConfig wide = model_config(c);
  wide.n_embd = 48;
  const std::string e = error_of([&] { SourceWeights(source, nn::ParamLayout(wide), 0); });
  EXPECT_NE(e.find("wte.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 32]"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 48]"), std::string::npos) << e;
}

TEST(Checkpoint, AKilledWriteLeavesTheLatestCheckpointLoadable) {
  TempDir dir("kill");
  const fs::path cfg = testing::write_tiny_run(dir.path);
  // A 3.7M-parameter model (44 MB per checkpoint: 4 B of weights and 8 B of moments each)
  // saved after every step, killed mid-write.
  pid_t child = spawn_trainer(
      cfg, {"model.vocab_size=8192", "model.n_embd=256", "model.n_head=4", "train.steps=1000000",
            "checkpoint.every=1", "checkpoint.keep_last=2", "train.val_every=0"});
  ASSERT_GT(child, 0);
  const fs::path run = dir.path / "runs/r", root = run / "checkpoints";
  // 120 s for the child's start-up and four steps of 64 tokens, each 1.4 GFLOP and a 44 MB
  // save (seconds on a busy machine); the loop polls without sleeping, so a write is seen.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool killed_mid_write = false;
  int complete = 0;  // wait for a few complete checkpoints, then kill during the next write
  std::string last;
  while (std::chrono::steady_clock::now() < deadline && !killed_mid_write) {
    std::error_code ec;
    const fs::path link = fs::read_symlink(root / "latest", ec);
    if (ec) continue;
    if (link.string() != last && !link.string().ends_with(".tmp")) ++complete, last = link.string();
    if (complete < 3) continue;
    for (const auto& e : fs::directory_iterator(root, ec))
      if (e.path().filename().string().ends_with(".tmp") && e.path().filename() != "latest.tmp") {
        killed_mid_write = ::kill(child, SIGKILL) == 0;
        break;
      }
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(killed_mid_write) << "never saw a checkpoint being written";
  const fs::path latest = latest_checkpoint(run);
  ASSERT_FALSE(latest.empty());
  EXPECT_FALSE(latest.string().ends_with(".tmp"));
  SavedModel saved = open_saved_model(run);  // verifies every file, loads the weights
  EXPECT_GT(saved.step, 0);                  // three saves were complete before the kill
}

// oneDNN splits its sums by thread: a resume on another thread count says that its bits
// differ from here on; on the same count it says nothing of it.
TEST(Training, AResumeOnAnotherThreadCountSaysSo) {
  TempDir dir("threads");
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Config c = train_tiny(dir, {"train.steps=2"});
  c.apply_override("train.steps=3");
  omp_set_num_threads(2);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_training(c), 0);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("resuming a run saved with 1 CPU threads per rank on 2"), std::string::npos)
      << err;
  c.apply_override("train.steps=4");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_training(c), 0);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("CPU threads per rank"), std::string::npos) << err;
  omp_set_num_threads(threads);
}

TEST(Training, NonFiniteLossStopsWithADiagnosticOrIsSkipped) {
  TempDir dir("nan");
  Config c = train_tiny(dir, {"train.steps=2"});
  {  // poison one weight of the checkpoint, rewritten with a valid manifest
    poison_checkpoint(dir.path / "runs/r", "ln_f.weight", NAN);
  }
  c.apply_override("train.steps=4");
  // The message names what is not finite and what helps, not the skip that would hide it.
  std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("step 3: the weights are not finite (the first: ln_f.weight)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("lower optimizer.lr"), std::string::npos) << e;
  // Skipped, the steps change nothing, and the run refuses to save the broken weights at its
  // end: the last good checkpoint stays `latest`.
  c.apply_override("train.on_nonfinite=skip");
  e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("step 4: not saving a checkpoint: the weights are not finite (the first: "
                   "ln_f.weight); the last checkpoint, step 2, is kept as latest"),
            std::string::npos)
      << e;
  EXPECT_EQ(fs::read_symlink(dir.path / "runs/r/checkpoints/latest").filename(), "step-2");
  EXPECT_FALSE(fs::exists(dir.path / "runs/r/checkpoints/step-4"));
  auto m = metrics_without_timings(dir.path / "runs/r", 2);
  ASSERT_FALSE(m.empty());
  EXPECT_TRUE(m.front()["skipped"].get<bool>());
}

// Weights that have gone out of range, under skip: the run stops after
// train.max_consecutive_skips skipped steps with an error naming why and what helps, and saves
// no checkpoint during the streak, so `latest` still names the one before it.
TEST(Training, SkippingStopsAfterItsLimitAndSavesNothingDuringTheStreak) {
  TempDir dir("diverge");
  Config c = train_tiny(dir, {"train.steps=2"});
  poison_checkpoint(dir.path / "runs/r", "wpe.weight", INFINITY);
  for (const char* o :
       {"train.steps=40", "train.on_nonfinite=skip", "train.max_consecutive_skips=3",
        "checkpoint.every=1", "checkpoint.keep_last=1"})
    c.apply_override(o);
  const std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("step 5: 3 steps skipped in a row and 3 in all"), std::string::npos) << e;
  EXPECT_NE(e.find("the weights are not finite (the first: wpe.weight)"), std::string::npos) << e;
  EXPECT_NE(e.find("train.max_consecutive_skips = 3"), std::string::npos) << e;
  EXPECT_NE(e.find("lower optimizer.lr"), std::string::npos) << e;
  EXPECT_EQ(fs::read_symlink(dir.path / "runs/r/checkpoints/latest").filename(), "step-2");
  for (int step : {3, 4, 5})
    EXPECT_FALSE(fs::exists(dir.path / "runs/r/checkpoints" / ("step-" + std::to_string(step))));
}

TEST(Export, Bf16WritesTheMastersRounded) {
  TempDir dir("export");
  train_tiny(dir, {"train.steps=2"});
  const fs::path out = dir.path / "exported";
  ASSERT_EQ(cmd_export({"--checkpoint", (dir.path / "runs/r").string(), "--out", out.string(),
                        "--dtype", "bf16"}),
            0);
  SafetensorsFile exported(out / "model.safetensors");
  SafetensorsFile masters(dir.path / "runs/r/checkpoints/step-2/model.safetensors");
  ASSERT_EQ(exported.tensors().size(), masters.tensors().size());
  for (const TensorEntry& m : masters.tensors()) {
    const TensorEntry& e = exported.get(m.name);
    ASSERT_EQ(e.dtype, DType::bf16) << m.name;
    ASSERT_EQ(e.shape, m.shape) << m.name;
    const float* w = static_cast<const float*>(m.data);
    const bf16* h = static_cast<const bf16*>(e.data);
    for (int64_t i = 0; i < m.numel(); ++i) ASSERT_EQ(h[i].bits, to_bf16(w[i]).bits) << m.name;
  }
  const auto cfg = nlohmann::json::parse(read_file(out / "config.json"));
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
  EXPECT_THROW(cmd_export({"--checkpoint", (dir.path / "runs/r").string(), "--out",
                           (dir.path / "x").string(), "--dtype", "fp8"}),
               UsageError);
}

TEST(Training, FrozenParametersDoNotChange) {
  TempDir dir("freeze");
  Config c = train_tiny(dir, {"train.steps=3", "train.freeze=[wpe.weight, 'h.0.*']"});
  SavedModel saved = open_saved_model(dir.path / "runs/r");
  nn::ExecConfig exec;
  exec.max_seq_len = 8;
  nn::Transformer init(saved.model->config(), exec);
  init.init_weights(uint64_t(c.integer("run.seed")));
  for (const nn::ParamInfo& p : init.layout().params()) {
    bool same = std::memcmp(init.params().as<float>() + p.offset,
                            saved.model->params().as<float>() + p.offset,
                            size_t(p.numel) * sizeof(float)) == 0;
    bool frozen = p.name == "wpe.weight" || p.name.starts_with("h.0.");
    EXPECT_EQ(same, frozen) << p.name;
  }
  c.apply_override("train.freeze=['h.9.*']");
  EXPECT_THROW(run_training(c), UsageError);
}

TEST(Training, StopSignalSavesAtAStepBoundaryAndExitsWithItsOwnCode) {
  TempDir dir("signal");
  const fs::path cfg = testing::write_tiny_run(dir.path);
  pid_t child = spawn_trainer(cfg, {"train.steps=1000000", "checkpoint.every=0"});
  ASSERT_GT(child, 0);
  const fs::path metrics = dir.path / "runs/r/metrics.jsonl";
  // Up to 30 s (600 x 50 ms) for the child's first step, as in hardening_test's RunLock: its
  // start-up and one step of 64 tokens take seconds at most.
  for (int i = 0; i < 600 && (!fs::exists(metrics) || fs::file_size(metrics) == 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(child, SIGUSR1);
  int status = 0;
  // Up to 60 s (1200 x 50 ms) for the step in progress and one save of the tiny model.
  for (int i = 0; i < 1200 && ::waitpid(child, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (::kill(child, 0) == 0) {  // still running after a minute: fail without hanging CTest
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the trainer did not stop after SIGUSR1";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kExitStopped);  // not 0: the run did not finish
  const fs::path latest = latest_checkpoint(dir.path / "runs/r");
  ASSERT_FALSE(latest.empty());
  Checkpoint c = open_checkpoint(latest);
  EXPECT_GT(c.state.step, 0);        // it had written metrics, so had taken a step
  EXPECT_LT(c.state.step, 1000000);  // and stopped before its train.steps
}

namespace {

// The 12-step run train_tiny made in `dir`: its loss falls, and sample, eval and export work on
// it; returns the export's folder.
fs::path learns_samples_evaluates_exports(const TempDir& dir) {
  std::vector<double> losses;
  for (const auto& j : metrics_without_timings(dir.path / "runs/r", 0))
    if (j.contains("loss")) losses.push_back(j.at("loss").get<double>());
  EXPECT_EQ(losses.size(), 12u);
  EXPECT_TRUE(!losses.empty() && losses.back() < losses.front());
  const std::string run = (dir.path / "runs/r").string();
  EXPECT_EQ(cmd_sample({run, "--max-new-tokens", "8"}), 0);
  EXPECT_EQ(cmd_eval({run, "--max-batches", "2"}), 0);
  const fs::path out = dir.path / "exported";
  EXPECT_EQ(cmd_export({run, "--out", out.string()}), 0);
  return out;
}

}  // namespace

// A Llama-style model through the whole app: training (its loss falls), sampling with the
// grouped KV cache, eval, and an export a Llama loader reads: Hugging Face names, (out, in)
// weights, an untied lm_head and a LlamaForCausalLM config.json.
TEST(Training, LlamaTrainsSamplesAndExportsAsHuggingFaceLlama) {
  TempDir dir("llama");
  train_tiny(dir, {"model.arch=llama", "model.n_kv_head=1", "model.ffn_multiple_of=16",
                   "model.tie_embeddings=false", "train.steps=12", "log.every=1"});
  const fs::path out = learns_samples_evaluates_exports(dir);
  SafetensorsFile weights(out / "model.safetensors");
  EXPECT_EQ(weights.get("model.embed_tokens.weight").shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(weights.get("model.layers.1.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(weights.get("model.layers.1.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{16, 32}));  // one key/value head of 16 channels
  EXPECT_EQ(weights.get("model.layers.0.mlp.gate_proj.weight").shape,
            (std::vector<int64_t>{96, 32}));  // 8/3 x 32 = 85, rounded up to 96
  EXPECT_EQ(weights.get("model.layers.0.mlp.down_proj.weight").shape,
            (std::vector<int64_t>{32, 96}));
  EXPECT_TRUE(weights.contains("model.norm.weight"));
  EXPECT_TRUE(weights.contains("lm_head.weight"));
  EXPECT_FALSE(weights.contains("model.layers.0.self_attn.q_proj.bias"));
  const auto config = nlohmann::json::parse(read_file(out / "config.json"));
  EXPECT_EQ(config.at("architectures")[0], "LlamaForCausalLM");
  EXPECT_EQ(config.at("num_key_value_heads"), 1);
  EXPECT_EQ(config.at("intermediate_size"), 96);
  EXPECT_EQ(config.at("tie_word_embeddings"), false);
}

// GPT-NeoX through the whole app: training (its loss falls), sampling with the KV cache, eval,
// and an export Hugging Face's GPTNeoXForCausalLM reads: its names, its config (parallel
// residual, partial rotary, untied embed_out), and the fused q/k/v rows interleaved by head
// where the checkpoint keeps [q; k; v].
TEST(Training, NeoxTrainsSamplesAndExportsAsHuggingFaceGptNeox) {
  TempDir dir("neox");
  train_tiny(dir, {"model.arch=neox", "model.rotary_pct=0.5", "model.tie_embeddings=false",
                   "train.steps=12", "log.every=1"});
  const fs::path out = learns_samples_evaluates_exports(dir);
  const auto config = nlohmann::json::parse(read_file(out / "config.json"));
  EXPECT_EQ(config.at("architectures")[0], "GPTNeoXForCausalLM");
  EXPECT_EQ(config.at("rotary_pct"), 0.5);
  EXPECT_EQ(config.at("use_parallel_residual"), true);
  EXPECT_EQ(config.at("intermediate_size"), 128);  // 4 x 32
  EXPECT_EQ(config.at("tie_word_embeddings"), false);
  SafetensorsFile exported(out / "model.safetensors");
  SafetensorsFile saved(dir.path / "runs/r/checkpoints/step-12/model.safetensors");
  EXPECT_TRUE(exported.contains("embed_out.weight"));
  EXPECT_TRUE(exported.contains("gpt_neox.final_layer_norm.bias"));
  const std::string qkv = "gpt_neox.layers.1.attention.query_key_value.weight";
  ASSERT_EQ(exported.get(qkv).shape, (std::vector<int64_t>{96, 32}));
  const float* hf = static_cast<const float*>(exported.get(qkv).data);
  const float* ours = static_cast<const float*>(saved.get(qkv).data);
  const int C = 32, hs = 16;
  int differ = 0;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 3; ++j)  // q, k, v
      for (int r = 0; r < hs; ++r)
        differ += std::memcmp(hf + ((h * 3 + j) * hs + r) * C, ours + (j * C + h * hs + r) * C,
                              C * sizeof(float)) != 0;
  EXPECT_EQ(differ, 0);
  EXPECT_NE(std::memcmp(hf, ours, 96 * C * sizeof(float)), 0);  // the orders do differ
}

// Fine-tuning (train.init_from): a new run starts from a run's latest checkpoint, or from a
// bf16 export of it, at step 0 with a fresh optimizer, well below a fresh start's loss; another
// model or another tokenizer is refused before anything is written.
TEST(Training, FineTuningStartsFromSavedWeightsWithAFreshOptimizer) {
  TempDir dir("finetune");
  train_tiny(dir, {"train.steps=40", "log.every=1"});
  auto first_loss = [&](const std::string& name) {
    for (const auto& j : metrics_without_timings(dir.path / "runs" / name, 0))
      if (j.contains("loss")) return j.at("loss").get<double>();
    return -1.0;
  };
  const std::string run = (dir.path / "runs/r").string(), exported = (dir.path / "exp").string();
  ASSERT_EQ(cmd_export({run, "--out", exported, "--dtype", "bf16"}), 0);
  Config fresh = tiny_config(dir.path / "data", dir.path / "runs", "fresh");
  fresh.apply_override("train.steps=2");
  fresh.apply_override("log.every=1");
  ASSERT_EQ(run_training(fresh), 0);
  for (const std::string& source : {run, exported}) {
    const std::string name = source == run ? "from_run" : "from_export";
    Config c = tiny_config(dir.path / "data", dir.path / "runs", name);
    c.apply_override("train.steps=2");
    c.apply_override("log.every=1");
    c.set("train.init_from", source);
    ASSERT_EQ(run_training(c), 0) << source;
    EXPECT_LT(first_loss(name), first_loss("fresh") - 0.5) << source;
    const Checkpoint ckpt = open_checkpoint(latest_checkpoint(dir.path / "runs" / name));
    EXPECT_EQ(ckpt.state.step, 2);  // counted from 0
    const CheckpointTensors t(ckpt, nn::ParamLayout(model_config(c)));
    EXPECT_EQ(t.optimizer_steps(), 2) << "a fresh optimizer";
  }
  // Another model: the first key that differs is named; nothing is written.
  Config wide = tiny_config(dir.path / "data", dir.path / "runs", "wide");
  wide.apply_override("model.n_embd=48");
  wide.set("train.init_from", run);
  std::string e = error_of([&] { run_training(wide); });
  EXPECT_NE(e.find("train.init_from"), std::string::npos) << e;
  EXPECT_NE(e.find("model.n_embd is 32 there but 48 here"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.path / "runs/wide/metrics.jsonl"));
  // Another tokenizer (trained on the same text to another size), and a broken one.
  fs::copy_file(testing::tokenizer_model(310), fs::path(exported) / "tokenizer.model",
                fs::copy_options::overwrite_existing);
  Config other = tiny_config(dir.path / "data", dir.path / "runs", "other");
  other.set("train.init_from", exported);
  e = usage_error_of([&] { run_training(other); });
  EXPECT_NE(e.find("comes with another tokenizer"), std::string::npos) << e;
  write_file_atomic(fs::path(exported) / "tokenizer.model", "not a tokenizer");
  e = error_of([&] { run_training(other); });
  EXPECT_NE(e.find("exp/tokenizer.model: not a SentencePiece model"), std::string::npos) << e;
  // A source that is not there is the config's fault, as a mismatch is: both exit 2.
  Config missing = tiny_config(dir.path / "data", dir.path / "runs", "missing");
  missing.set("train.init_from", (dir.path / "nowhere").string());
  e = usage_error_of([&] { run_training(missing); });
  EXPECT_NE(e.find("nowhere is neither a checkpoint, a run directory with checkpoints nor a "
                   "Hugging Face model folder"),
            std::string::npos)
      << e;
  e = usage_error_of([&] { run_training(wide); });
  EXPECT_NE(e.find("model.n_embd is 32 there but 48 here"), std::string::npos) << e;
}

}  // namespace trainer::app
