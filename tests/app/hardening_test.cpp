// Bad input and failure paths of the training job and the commands around it: one writer per
// run directory, checks that run before the first step, write failures, self-contained
// checkpoints used from another directory, refusal to report broken numbers, the end of the
// data, cross-checked and self-describing checkpoint files, readers of a live run, retention
// across a change of policy, and the tokenizer's identity.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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
#include "data/tokenizer.h"
#include "nn/adamw.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app {

namespace fs = std::filesystem;

using testing::error_of;
using testing::poison_checkpoint;
using testing::spawn_trainer;
using testing::TempDir;
using testing::tiny_config;
using testing::train_tiny;
using testing::usage_error_of;

namespace {

nlohmann::json trainer_state(const fs::path& run) {
  return nlohmann::json::parse(read_file(latest_checkpoint(run) / "trainer_state.json"));
}

// Runs f with the working directory set to `dir`.
template <typename F>
auto in_directory(const fs::path& dir, F&& f) {
  const fs::path before = fs::current_path();
  fs::current_path(dir);
  struct Restore {
    fs::path to;
    ~Restore() { fs::current_path(to); }
  } restore{before};
  return f();
}

// Rewrites one file of a checkpoint and its size and CRC in the manifest, so that only the
// cross-checks can notice.
void replace_checkpoint_file(const fs::path& ckpt, const std::string& file,
                             const std::string& bytes) {
  write_file_atomic(ckpt / file, bytes);
  auto manifest = nlohmann::json::parse(read_file(ckpt / "manifest.json"));
  manifest["files"][file] = {{"bytes", bytes.size()}, {"crc32", crc32(bytes.data(), bytes.size())}};
  write_file_atomic(ckpt / "manifest.json", manifest.dump(2) + "\n");
}

}  // namespace

TEST(RunLock, ASecondTrainerOnTheSameRunIsRefusedNamingTheHolder) {
  TempDir dir("lock");
  testing::write_corpus(dir.path / "data");
  const Config c = tiny_config(dir.path / "data", dir.path / "runs", "r");
  const fs::path cfg = dir.path / "c.yaml";
  write_file_atomic(cfg, c.to_yaml());
  pid_t child = spawn_trainer(cfg, {"train.steps=1000000", "checkpoint.every=0"});
  ASSERT_GT(child, 0);
  const fs::path metrics = dir.path / "runs/r/metrics.jsonl";
  // Up to 30 s (600 x 50 ms) for the child's first step: its start-up (a 300-piece tokenizer, a
  // 2-block model) and one step of 64 tokens take seconds at most, even on 2 busy cores; a child
  // slower than that fails the check below instead of hanging it.
  for (int i = 0; i < 600 && (!fs::exists(metrics) || fs::file_size(metrics) == 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string e = error_of([&] { run_training(c); });
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_NE(
      e.find("run directory " + (dir.path / "runs/r").string() + " is in use by another trainer"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("pid " + std::to_string(child)), std::string::npos) << e;
  // The kernel released the killed holder's lock: the run starts (afresh, by consent).
  Config again = c;
  again.apply_override("train.steps=1");
  EXPECT_EQ(run_training(again, {.force = true}), 0);
}

TEST(StartUp, AMissingValidationSplitIsCaughtBeforeTheFirstStep) {
  TempDir dir("noval");
  testing::write_corpus(dir.path / "data", 120, /*val_docs=*/0);
  const Config c = tiny_config(dir.path / "data", dir.path / "runs", "r");
  const std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("train.val_every = 4"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.path / "runs/r/checkpoints"));
  EXPECT_FALSE(fs::exists(dir.path / "runs/r/metrics.jsonl"));
  Config no_val = c;
  no_val.apply_override("train.val_every=0");
  EXPECT_EQ(run_training(no_val), 0);
}

// data.verify_checksums on a train shard with one flipped payload byte: `all` refuses to start
// (nothing written), first_use fails at the first read of the shard, naming it, with no
// checkpoint, and `none` trains on.
TEST(StartUp, ACorruptShardIsCaughtWhenVerificationSaysSo) {
  TempDir dir("verify");
  testing::write_corpus(dir.path / "data");
  const fs::path shard = dir.path / "data/train-00000.bin";
  std::string bytes = read_file(shard);
  bytes[bytes.size() - 3] ^= 0x01;
  write_file_atomic(shard, bytes);
  Config c = tiny_config(dir.path / "data", dir.path / "runs", "all");
  c.apply_override("data.verify_checksums=all");
  std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("train-00000.bin: shard checksum mismatch"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.path / "runs/all/metrics.jsonl"));
  c = tiny_config(dir.path / "data", dir.path / "runs", "first_use");
  e = error_of([&] { run_training(c); });  // the default
  EXPECT_NE(e.find("train-00000.bin: shard checksum mismatch"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.path / "runs/first_use/checkpoints"));
  c = tiny_config(dir.path / "data", dir.path / "runs", "none");
  c.apply_override("data.verify_checksums=none");
  EXPECT_EQ(run_training(c), 0);
}

TEST(StartUp, TheTokenizerMustExistAndBeTheCorpusTokenizer) {
  TempDir dir("tokcheck");
  testing::write_corpus(dir.path / "data");
  Config c = tiny_config(dir.path / "data", dir.path / "runs", "r");
  c.set("data.tokenizer", (dir.path / "data/missing.model").string());
  std::string e = usage_error_of([&] { run_training(c); });
  EXPECT_EQ(e.find("data.tokenizer = "), 0u) << e;
  EXPECT_NE(e.find("missing.model does not exist"), std::string::npos) << e;
  c.set("data.tokenizer", testing::tokenizer_model(310).string());  // another tokenizer
  e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("is not the tokenizer"), std::string::npos) << e;
  EXPECT_NE(e.find("was prepared with"), std::string::npos) << e;
  c.set("data.tokenizer", (dir.path / "data/manifest.json").string());  // not a tokenizer
  e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("manifest.json: model: missing or not an object"), std::string::npos) << e;
}

TEST(StartUp, ARefusedResumeChangesNothingInTheRun) {
  TempDir dir("refused");
  Config c = train_tiny(dir, {"train.steps=2"});
  const fs::path run = dir.path / "runs/r";
  const std::string config = read_file(run / "config.yaml");
  const std::string metrics = read_file(run / "metrics.jsonl");
  c.apply_override("data.mode=pack");  // changes the data order: not resumable
  c.apply_override("train.steps=4");
  // A config that does not fit the checkpoint is a usage error (exit 2), like any config error.
  const std::string e = usage_error_of([&] { run_training(c); });
  EXPECT_EQ(e.find("cannot resume"), 0u) << e;
  EXPECT_EQ(read_file(run / "config.yaml"), config);
  EXPECT_EQ(read_file(run / "metrics.jsonl"), metrics);
}

TEST(StartUp, AFreshStartOverAnEarlierRunNeedsForce) {
  TempDir dir("force");
  Config c = train_tiny(dir, {"train.steps=2", "checkpoint.every=1"});
  const fs::path run = dir.path / "runs/r";
  const std::string metrics = read_file(run / "metrics.jsonl");
  c.apply_override("train.resume=none");
  c.apply_override("train.steps=1");
  try {
    run_training(c);
    FAIL() << "a fresh start over an earlier run was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(run / "metrics.jsonl"), metrics);
  EXPECT_TRUE(fs::exists(run / "checkpoints/step-2"));
  ASSERT_EQ(run_training(c, {.force = true}), 0);
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-2")) << "the earlier run's checkpoints stayed";
  EXPECT_EQ(trainer_state(run)["step"], 1);
}

// See Note [Write failures]: metrics.jsonl on a full device (/dev/full).
TEST(WriteFailures, AFailedMetricsWriteSavesACheckpointAtOnce) {
  TempDir dir("devfull");
  testing::write_corpus(dir.path / "data");
  Config c = tiny_config(dir.path / "data", dir.path / "runs", "r");
  c.apply_override("train.steps=4");
  c.apply_override("checkpoint.every=0");
  c.apply_override("train.val_every=0");
  fs::create_directories(dir.path / "runs/r");
  fs::create_symlink("/dev/full", dir.path / "runs/r/metrics.jsonl");
  ASSERT_EQ(run_training(c), 0);
  EXPECT_TRUE(fs::exists(dir.path / "runs/r/checkpoints/step-1")) << "no checkpoint at step 1";
  EXPECT_TRUE(fs::exists(dir.path / "runs/r/checkpoints/step-4"));
  const std::string log = read_file(dir.path / "runs/r/train.log");
  EXPECT_NE(log.find("cannot write " + (dir.path / "runs/r/metrics.jsonl").string()),
            std::string::npos)
      << log;
}

// Checkpoints carry their tokenizer and runs record absolute data paths: sample, export and
// inspect work from any directory with the corpus gone, eval once it is back.
TEST(SelfContained, CommandsWorkFromAnotherDirectory) {
  TempDir dir("contained"), elsewhere("elsewhere");
  testing::write_corpus(dir.path / "data");
  Config c = tiny_config("data", "runs", "r");  // relative paths, resolved in dir
  c.set("data.tokenizer", "data/tok.model");
  c.apply_override("train.steps=2");
  ASSERT_EQ(in_directory(dir.path, [&] { return run_training(c); }), 0);
  const std::string run = (dir.path / "runs/r").string();
  fs::rename(dir.path / "data", dir.path / "data_away");
  in_directory(elsewhere.path, [&] {
    EXPECT_EQ(cmd_sample({run, "--max-new-tokens", "5"}), 0);
    EXPECT_EQ(cmd_export({run, "--out", "exported"}), 0);
    EXPECT_TRUE(fs::exists(elsewhere.path / "exported/tokenizer.model"));
    EXPECT_EQ(cmd_inspect({run}), 0);
    // A tokenizer that is not the checkpoint's is refused.
    const std::string e = error_of([&] {
      cmd_export({run, "--out", "other", "--tokenizer", testing::tokenizer_model(310).string()});
    });
    EXPECT_NE(e.find("is not the one checkpoint"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(elsewhere.path / "other.tmp"));
    EXPECT_FALSE(fs::exists(elsewhere.path / "other"));
  });
  fs::rename(dir.path / "data_away", dir.path / "data");
  in_directory(elsewhere.path, [&] { EXPECT_EQ(cmd_eval({run, "--max-batches", "2"}), 0); });
}

TEST(HonestNumbers, EvalAndSampleRefuseNonFiniteWeights) {
  TempDir dir("nanweights");
  train_tiny(dir, {"train.steps=2"});
  { poison_checkpoint(dir.path / "runs/r", "ln_f.bias", NAN); }
  const std::string run = (dir.path / "runs/r").string();
  // Refused where the weights are read, naming the tensor (before any loss or logit is made).
  std::string e = usage_error_of([&] { cmd_eval({run}); });
  EXPECT_NE(e.find("tensor 'ln_f.bias' holds NaN (element 0)"), std::string::npos) << e;
  e = usage_error_of([&] { cmd_sample({run, "--max-new-tokens", "3"}); });
  EXPECT_NE(e.find("tensor 'ln_f.bias' holds NaN (element 0)"), std::string::npos) << e;
}

// A sample cut short by the model's context says so (the tiny model sees 16 positions, so 50
// new tokens cannot fit). A seed whose sample draws the end-of-text token ends early by
// nature and says nothing; across 16 seeds some sample must reach the context's end.
TEST(HonestNumbers, ASampleCutByTheContextSaysSo) {
  TempDir dir("samplelen");
  train_tiny(dir, {"train.steps=2"});
  const std::string run = (dir.path / "runs/r").string();
  int warned = 0;
  for (int seed = 1; seed <= 16; ++seed) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(cmd_sample({run, "--max-new-tokens", "50", "--seed", std::to_string(seed)}), 0);
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (err.find("of the 50 new tokens asked for: the model sees at most 16 positions "
                 "(model.max_seq_len), and the prompt took 1") != std::string::npos)
      ++warned;
  }
  // After 2 steps the model is near uniform over 64 tokens, end-of-text among them (1/25 of the
  // corpus at most once learned): a sample avoids it for its 15 tokens with probability >= 0.54,
  // so all 16 seeds end early with < 1e-5.
  EXPECT_GT(warned, 0);
}

// Note [Plan magnitude]: sizes each within its key's range whose product leaves 64 bits
// (2^20 rows of 2^20 tokens over 2^24 words: 2^64 logits) are refused, not printed negative.
TEST(HonestNumbers, APlanPastSixtyFourBitsIsRefused) {
  TempDir dir("plan64");
  const fs::path cfg = dir.path / "c.yaml";
  write_file_atomic(cfg, tiny_config(dir.path / "data", dir.path / "runs", "r").to_yaml());
  const std::string e = usage_error_of([&] {
    cmd_plan({cfg.string(), "--set", "model.vocab_size=16777216", "--set",
              "model.max_seq_len=1048576", "--set", "data.seq_len=1048576", "--set",
              "data.batch_size=1048576"});
  });
  EXPECT_NE(e.find("past what 64-bit sizes, and any machine, hold"), std::string::npos) << e;
}

// Note [Memory check]: a run whose plan exceeds the machine's available memory is refused
// before the model allocates (the kernel would kill it part-way, exit 137, without a word);
// `trainer plan` says it does not fit.
TEST(HonestNumbers, ARunLargerThanTheMachineIsRefusedBeforeItAllocates) {
  TempDir dir("toolarge");
  testing::write_corpus(dir.path / "data");
  Config c = tiny_config(dir.path / "data", dir.path / "runs", "r");
  for (const char* o : {"model.vocab_size=16777216", "model.n_embd=8192", "model.n_head=64"})
    c.apply_override(o);  // 1.4e11 parameters: about 2 TiB of state
  const std::string e = usage_error_of([&] { run_training(c); });
  EXPECT_NE(e.find("GiB are available"), std::string::npos) << e;
  EXPECT_NE(e.find("train.memory_check: warn"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.path / "runs/r/checkpoints"));
  const fs::path cfg = dir.path / "c.yaml";
  write_file_atomic(cfg, c.to_yaml());
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cmd_plan({cfg.string()}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("does NOT fit"), std::string::npos) << out;
}

// A one-layer model of width 64 at vocabulary `vocab`, trained 2 steps with a save after each, in
// a process of its own (under `dir`): its peak resident memory and the plan's total, in MiB.
std::pair<double, double> peak_and_plan(const fs::path& dir, int vocab) {
  const fs::path cfg = testing::write_tiny_run(dir);
  const pid_t child = spawn_trainer(
      cfg, {"model.vocab_size=" + std::to_string(vocab), "model.n_embd=64", "model.n_head=1",
            "model.n_layer=1", "train.steps=2", "checkpoint.every=1", "train.val_every=0"});
  EXPECT_GT(child, 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "vocabulary " << vocab;
  const std::string log = read_file(dir / "runs/r/train.log");
  const size_t at = log.find("peak resident memory ");
  double peak = 0, plan = 0;
  EXPECT_TRUE(at != std::string::npos &&
              std::sscanf(log.c_str() + at, "peak resident memory %lf MiB (the plan: %lf", &peak,
                          &plan) == 2)
      << log;
  return {peak, plan};
}

// The plan counts what a run holds: initialising, saving (the optimizer's moments) and
// checking the weights before a save go a piece at a time, so a large vocabulary adds no
// V x C copies to the peak (they were 3 x V x C x 4 bytes: 384 MiB here, past the plan).
TEST(HonestNumbers, ALargeVocabularyStaysWithinItsPlan) {
  TempDir dir("bigvocab");
  constexpr int kVocab = 524288;
  constexpr double kEmbeddingMib = double(kVocab) * 64 * 4 / (1 << 20);  // V x C fp32: 128 MiB
  const auto [small_peak, small_plan] = peak_and_plan(dir.path / "small", 512);
  const auto [peak, plan] = peak_and_plan(dir.path / "large", kVocab);
  // The embedding with its gradient and two moments: 4 x 128 MiB (the logits add 128 more).
  EXPECT_GT(plan, 4 * kEmbeddingMib);
  // What the process holds beyond the plan for itself (its libraries' pages, cuDNN's and
  // cuBLAS's in a CUDA build, oneDNN's kernels and per-thread scratch, the loader) is the same at
  // a vocabulary of 512 as at 524288, so the difference of the two excesses is what grows with
  // the vocabulary outside the plan: the 4 MiB host pieces that saves and initialisation go by
  // (kHostPiece), and what this guards against, a V x C fp32 copy, 128 MiB each. Half a copy
  // sees one: measured, the large run ends 53 MiB nearer its plan than the small one (a plan
  // counts its buffers whole, and 2 steps need not touch all of them), so one copy would show
  // as 75 MiB.
  const double excess = (peak - plan) - (small_peak - small_plan);
  EXPECT_LT(excess, kEmbeddingMib / 2)
      << "peak " << peak << " MiB, plan " << plan << " MiB; at vocabulary 512: " << small_peak
      << ", " << small_plan;
  std::printf("beyond the plan: %.1f MiB at vocabulary %d, %.1f MiB at 512\n", peak - plan, kVocab,
              small_peak - small_plan);
}

// The run's last word on memory (Note [Memory report]): each planned category's peak is its
// plan, the loader's batches stay within theirs, and the resident peak follows. Exact to the
// byte in the model and sharding tests; here, as printed (0.1 MiB).
TEST(HonestNumbers, TheMemoryReportMatchesThePlanByCategory) {
  TempDir dir("memory_report");
  train_tiny(
      dir, {"train.steps=2", "model.vocab_size=4096", "model.n_embd=64", "checkpoint.async=true"});
  const std::string log = read_file(dir.path / "runs/r/train.log");
  const std::string head = "memory (MiB, plan/peak): ";
  const size_t at = log.find(head);
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line = log.substr(at, log.find('\n', at) - at);
  auto figures = [&](const std::string& name) {
    const size_t p = line.find(" " + name + " ");
    double plan = -1, peak = -1;
    EXPECT_TRUE(p != std::string::npos &&
                std::sscanf(line.c_str() + p + name.size() + 2, "%lf/%lf", &plan, &peak) == 2)
        << name << " in " << line;
    return std::pair{plan, peak};
  };
  for (const char* name : {"weights", "gradients", "optimizer", "activations", "workspace",
                           "communication", "checkpoint"}) {
    const auto [plan, peak] = figures(name);
    EXPECT_EQ(plan, peak) << name << ": " << line;
  }
  EXPECT_GT(figures("weights").first, 0.9);  // 4096 x 64 x 4 bytes and the blocks: over 1 MiB
  // checkpoint.async's host copy: the fp32 masters (all of `weights` in fp32) and both
  // moments. Each figure is rounded to 0.1 MiB: 0.05 + 3 x 0.05 apart at most.
  EXPECT_NEAR(figures("checkpoint").first, 3 * figures("weights").first, 0.2 + 1e-9);
  const auto [loader_plan, loader_peak] = figures("loader");
  EXPECT_LE(loader_peak, loader_plan) << line;
  EXPECT_NE(line.find("resident peak"), std::string::npos) << line;
}

TEST(HonestNumbers, MfuIsReportedAgainstTheStatedPeak) {
  TempDir dir("peak");
  const Config c = train_tiny(dir, {"train.steps=3", "log.peak_gflops=2"});
  const RunConfig rc = resolve_run(c);
  const double fpt = rc.model.token_flops().at(rc.train_data.seq_len);
  std::ifstream in(dir.path / "runs/r/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("mfu")) continue;
    // The same double arithmetic on values JSON round-trips: a few ulps (1e-16) apart.
    EXPECT_NEAR(j["mfu"].get<double>(), fpt * j["tokens_per_s"].get<double>() / 2e9,
                1e-9 * j["mfu"].get<double>());
    ++lines;
  }
  EXPECT_EQ(lines, 3);
  EXPECT_NE(read_file(dir.path / "runs/r/train.log").find("log.peak_gflops = 2 GFLOP/s (stated)"),
            std::string::npos);
}

// With data.epochs = 1 a step at the end of the data takes the micro-batches that are left:
// accumulating 3 trains on exactly the tokens accumulating 1 does.
TEST(EndOfData, NoMicroBatchIsDropped) {
  TempDir dir("epoch_end");
  testing::write_corpus(dir.path / "data", 37, 5);  // an odd number of batches
  int64_t tokens[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    Config c = tiny_config(dir.path / "data", dir.path / "runs", "r" + std::to_string(k));
    c.apply_override("data.epochs=1");
    c.apply_override("train.steps=100000");  // the data ends first: 37 x <= 45 tokens, < 30 steps
    c.apply_override("train.val_every=0");
    c.apply_override("data.mode=pack");
    c.apply_override(k == 0 ? "train.grad_accum=1" : "train.grad_accum=3");
    ASSERT_EQ(run_training(c), 0);
    tokens[k] = trainer_state(dir.path / "runs" / ("r" + std::to_string(k)))["tokens_seen"];
  }
  EXPECT_GT(tokens[0], 0);  // 37 documents of >= 6 tokens: more than three batches of 64
  EXPECT_EQ(tokens[1], tokens[0]);
}

TEST(Checkpoint, ItsFilesAreCrossChecked) {
  TempDir dir("crosscheck");
  train_tiny(dir, {"train.steps=2"});
  const fs::path ckpt = latest_checkpoint(dir.path / "runs/r");
  auto state = nlohmann::json::parse(read_file(ckpt / "trainer_state.json"));
  state["step"] = 7;
  replace_checkpoint_file(ckpt, "trainer_state.json", state.dump(2));
  std::string e = error_of([&] { open_checkpoint(ckpt); });
  EXPECT_NE(e.find("the manifest is for step 2 but trainer_state.json says step 7"),
            std::string::npos)
      << e;
  state["step"] = 2;
  replace_checkpoint_file(ckpt, "trainer_state.json", state.dump(2));
  replace_checkpoint_file(ckpt, "tokenizer.model", "not the tokenizer");
  e = error_of([&] { open_checkpoint(ckpt); });
  EXPECT_NE(e.find("does not match the trainer state's tokenizer hash"), std::string::npos) << e;
}

// Note [Self-describing files]: a tensor file copied from another step is refused by its own
// header, although its size and CRC in the manifest were made to match.
TEST(Checkpoint, ATensorFileFromAnotherStepIsRefused) {
  TempDir dir("header");
  train_tiny(dir, {"train.steps=4", "checkpoint.every=2"});
  const fs::path run = dir.path / "runs/r", ckpt = run / "checkpoints/step-4";
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string kept = read_file(ckpt / file);
    replace_checkpoint_file(ckpt, file, read_file(run / "checkpoints/step-2" / file));
    const std::string e = error_of([&] { open_saved_model(ckpt); });
    EXPECT_NE(e.find(std::string(file) + ": its header says step 2 but the checkpoint expects 4"),
              std::string::npos)
        << e;
    replace_checkpoint_file(ckpt, file, kept);
  }
  EXPECT_EQ(open_saved_model(ckpt).step, 4);
}

// Note [Live readers]: `latest` never names a temporary, a save killed between renaming its
// checkpoint and repointing the link leaves the newer checkpoint the one read, and an opened
// checkpoint stays whole for its reader when a live run deletes it.
TEST(LiveReaders, LatestIsAlwaysAWholeCheckpoint) {
  TempDir dir("live");
  train_tiny(dir, {"train.steps=4", "checkpoint.every=2"});
  const fs::path run = dir.path / "runs/r", root = run / "checkpoints";
  repoint_latest(run, root / "step-2");  // killed before the link moved
  EXPECT_EQ(latest_checkpoint(run), root / "step-4");
  fs::remove(root / "latest");  // a trainer before version 2, killed while renaming
  fs::create_directory_symlink("step-4.tmp", root / "latest");
  EXPECT_EQ(latest_checkpoint(run), root / "step-4");
  SavedModel saved = open_saved_model(run);  // its checkpoint opened, to be read again below
  // A trainer before version 2 killed after pointing `latest` at its complete temporary but
  // before renaming it: readers take the temporary, and the next trainer finishes the rename.
  fs::rename(root / "step-4", root / "step-4.tmp");
  fs::remove(root / "latest");
  fs::create_directory_symlink("step-4.tmp", root / "latest");
  EXPECT_EQ(latest_checkpoint(run), root / "step-4.tmp");
  EXPECT_EQ(open_checkpoint_of(run).state.step, 4);
  finish_interrupted_saves(run);
  EXPECT_EQ(fs::read_symlink(root / "latest"), "step-4");
  EXPECT_FALSE(fs::exists(root / "step-4.tmp"));
  fs::remove_all(root / "step-4");  // pruned by the live run while being read
  SourceWeights(saved, saved.model->layout(), 0).load(*saved.model);
  EXPECT_EQ(tokenizer_of(saved).bytes, read_file(dir.path / "data/tok.model"));
}

// Note [Stop marker]: the launch scripts find the run directory with `trainer config
// --run-dir`, passing it train's own command line (--force included).
TEST(StopMarker, ConfigNamesTheRunDirectoryFromATrainCommandLine) {
  TempDir dir("rundir");
  const fs::path cfg = dir.path / "c.yaml";
  write_file_atomic(cfg, tiny_config(dir.path / "data", dir.path / "runs", "r").to_yaml());
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cmd_config({cfg.string(), "--set", "run.name=other", "--force", "--run-dir"}), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), (dir.path / "runs/other").string() + "\n");
}

// Readers of a run that saves at every step (and prunes all but the newest) never fail.
TEST(LiveReaders, ReadingARunThatSavesEveryStepNeverFails) {
  TempDir dir("live_run");
  const fs::path cfg = testing::write_tiny_run(dir.path);
  const pid_t child = spawn_trainer(cfg, {"train.steps=1000000", "checkpoint.every=1",
                                          "checkpoint.keep_last=1", "train.val_every=0"});
  ASSERT_GT(child, 0);
  struct Reap {  // the child dies with the test, however it ends
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{child};
  const fs::path run = dir.path / "runs/r";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int reads = 0, steps_seen = 0;
  int64_t last = -1;
  std::string failure;
  while (std::chrono::steady_clock::now() < deadline && steps_seen < 40 && failure.empty()) {
    if (latest_checkpoint(run).empty()) {  // before the first save
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    try {
      const SavedModel saved = open_saved_model(run);
      steps_seen += saved.step != last;
      last = saved.step;
      ++reads;
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  EXPECT_EQ(failure, "") << "after " << reads << " reads";
  EXPECT_EQ(steps_seen, 40) << "the run saved too few checkpoints in 60 s while being read";
}

// Note [Retention]: a resume under another keep_last/keep_every deletes nothing saved under
// the earlier policy; --force applies the new policy to those too.
TEST(Retention, AChangeOfPolicyDeletesNothingSavedBefore) {
  TempDir dir("retention");
  Config c = train_tiny(dir, {"train.steps=4", "checkpoint.every=1", "checkpoint.keep_last=3",
                              "checkpoint.keep_every=2"});
  const fs::path run = dir.path / "runs/r";
  auto steps = [&] {
    std::vector<int64_t> out;
    for (const auto& [step, path] : list_checkpoints(run)) out.push_back(step);
    return out;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{2, 3, 4}));
  for (const char* o : {"train.steps=6", "checkpoint.keep_last=1", "checkpoint.keep_every=0"})
    c.apply_override(o);
  ASSERT_EQ(run_training(c), 0);
  EXPECT_EQ(steps(), (std::vector<int64_t>{2, 3, 4, 6}));
  c.apply_override("train.steps=7");
  ASSERT_EQ(run_training(c, {.force = true}), 0);
  EXPECT_EQ(steps(), (std::vector<int64_t>{7}));
}

// Note [Tokenizer identity]: the same tokenizer retrained under other file names resumes the
// run; SentencePiece's model holds those names, so its bytes differ.
TEST(StartUp, TheSameTokenizerUnderAnotherNameResumes) {
  TempDir dir("tokname");
  Config c = train_tiny(dir, {"train.steps=2"});
  const fs::path text = testing::tokenizer_model().parent_path() / "text.txt";
  fs::copy_file(text, dir.path / "renamed.txt");
  data::TokenizerTrainOptions o;
  o.inputs = {(dir.path / "renamed.txt").string()};
  o.vocab_size = 300;
  o.out = dir.path / "renamed.model";
  o.threads = 1;
  data::train_tokenizer(o);
  ASSERT_NE(read_file(o.out), read_file(testing::tokenizer_model()));
  c.apply_override("data.tokenizer=" + o.out.string());
  c.apply_override("train.steps=3");
  EXPECT_EQ(run_training(c), 0);
  EXPECT_EQ(trainer_state(dir.path / "runs/r")["step"], 3);
}

}  // namespace trainer::app
