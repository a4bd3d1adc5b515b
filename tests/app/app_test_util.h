// Helpers for the app tests: a temporary working directory and a small synthetic prepared
// corpus (train and val splits, vocabulary 64) with learnable structure, written through the
// data layer's own shard writer.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "app/checkpoint.h"
#include "app/checkpoint_save.h"
#include "app/config.h"
#include "app/run_setup.h"
#include "app/run_training.h"
#include "common/temp_dir.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "nn/transformer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app::testing {

namespace fs = std::filesystem;
using trainer::testing::TempDir;

inline constexpr uint32_t kVocab = 64;

// A real (small) SentencePiece tokenizer of `vocab` pieces, trained once per test process:
// runs copy the default one into themselves, and start-up checks it against the corpus;
// another size makes another tokenizer of the same text.
inline const fs::path& tokenizer_model(int vocab = 300) {
  static const TempDir temp("tokenizer");  // removed at exit
  static std::map<int, fs::path> paths;
  if (!paths.contains(vocab)) {
    const fs::path& dir = temp.path;
    if (!fs::exists(dir / "text.txt")) {
      std::ofstream text(dir / "text.txt");
      for (int i = 0; i < 400; ++i)
        text << "the quick brown fox " << i % 13 << " jumps over the lazy dog\n";
    }
    data::TokenizerTrainOptions o;
    o.inputs = {(dir / "text.txt").string()};
    o.vocab_size = vocab;
    o.out = dir / fmt::format("tok{}.model", vocab);
    o.threads = 1;
    data::train_tokenizer(o);
    paths[vocab] = o.out;
  }
  return paths.at(vocab);
}

// Documents of varied length whose next token mostly follows from the current one, with the
// tokenizer above copied in as tok.model (ids below 64 stand for its pieces).
inline void write_corpus(const fs::path& dir, int train_docs = 120, int val_docs = 20) {
  fs::create_directories(dir);
  fs::copy_file(tokenizer_model(), dir / "tok.model", fs::copy_options::overwrite_existing);
  const uint64_t tokenizer_hash = data::tokenizer_hash(read_file(dir / "tok.model"));
  data::Manifest m;
  m.tokenizer_file = "tok.model";
  m.tokenizer_hash = tokenizer_hash;
  m.vocab_size = kVocab;
  m.token_bytes = data::token_bytes_for_vocab(kVocab);
  m.eos_id = 2;
  m.input_format = "synthetic";
  std::mt19937 rng(42);
  for (auto [split, n] :
       {std::pair{std::string("train"), train_docs}, {std::string("val"), val_docs}}) {
    data::SplitInfo& info = m.splits[split];
    data::ShardWriter w(kVocab, tokenizer_hash);
    for (int d = 0; d < n; ++d) {
      std::vector<int32_t> doc;
      int len = 5 + int(rng() % 40);
      int32_t t = 3 + int32_t(rng() % 60);
      for (int p = 0; p < len; ++p) {
        doc.push_back(t);
        t = 3 + (t * 5 + (rng() % 8 == 0 ? 1 : 0)) % 61;
      }
      doc.push_back(2);  // end of document
      w.add_document(doc);
      info.documents += 1;
      info.tokens += doc.size();
      info.utf8_bytes += doc.size() * 4;
    }
    const std::string file = split + "-00000.bin";
    info.shards.push_back({file, w.num_docs(), w.num_tokens(), w.file_bytes()});
    w.write(dir / file);
  }
  data::write_manifest(dir, m);
}

// A config for a tiny model on the corpus in `data_dir`, writing runs under `runs_dir`.
inline Config tiny_config(const fs::path& data_dir, const fs::path& runs_dir,
                          const std::string& name) {
  Config c;
  // dist.timeout_s = 30: these runs are one process, whose collectives wait on no other rank
  // (the start-up's file probe waits a quarter of it, at most 1 s). log.peak_gflops is stated:
  // measuring the MFU reference takes rounds of 0.4 s at each start until two agree, up to 6 on
  // a busy machine (app_default_configs runs the measurement).
  for (const char* s :
       {"model.vocab_size=64", "model.max_seq_len=16", "model.n_layer=2", "model.n_head=2",
        "model.n_embd=32", "data.batch_size=4", "data.seq_len=16", "train.steps=12",
        "train.val_every=4", "train.val_batches=2", "checkpoint.every=5", "checkpoint.keep_last=10",
        "log.every=1", "log.progress=off", "schedule.warmup_steps=3", "optimizer.lr=0.01",
        "dist.timeout_s=30", "log.peak_gflops=100"})
    c.apply_override(s);
  c.set("data.path", data_dir.string());
  c.set("data.tokenizer", (data_dir / "tok.model").string());
  c.set("run.dir", runs_dir.string());
  c.set("run.name", name);
  return c;
}

// metrics.jsonl without the timing fields, which legitimately differ between runs (and the
// bytes the groups carried, which differ between layouts).
inline std::vector<nlohmann::json> metrics_without_timings(const fs::path& run,
                                                           int64_t after_step) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["step"].get<int64_t>() <= after_step) continue;
    for (const char* k : {"tokens_per_s", "mfu", "step_ms", "data_ms", "forward_ms", "backward_ms",
                          "optimizer_ms", "comm_wait_ms", "comm_busy_ms", "comm_hidden", "rss_mib",
                          "comm_busbw_gbps", "tensor_bus_bytes", "data_bus_bytes"})
      j.erase(k);
    out.push_back(j);
  }
  return out;
}

// A tiny run "r" on a fresh synthetic corpus in `dir`, trained with the overrides; returns
// its config for a follow-up run.
inline Config train_tiny(const TempDir& dir, std::initializer_list<const char*> overrides) {
  write_corpus(dir.path / "data");
  Config c = tiny_config(dir.path / "data", dir.path / "runs", "r");
  for (const char* o : overrides) c.apply_override(o);
  if (run_training(c) != 0) throw std::runtime_error("the tiny training run failed");
  return c;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The message of the usage error (exit 2: the config is the user's to change) `f` throws; any
// other outcome is named instead, so that a match on the message fails.
inline std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const Error& e) {
    return std::string("(not a usage error, exit 1) ") + e.what();
  }
  return "(no error)";
}

// The corpus and the tiny config (run "r") under `dir`, for a trainer of its own
// (spawn_trainer); returns the config file.
inline fs::path write_tiny_run(const fs::path& dir) {
  write_corpus(dir / "data");
  const fs::path cfg = dir / "c.yaml";
  write_file_atomic(cfg, tiny_config(dir / "data", dir / "runs", "r").to_yaml());
  return cfg;
}

// The trainer binary of this build: its twin where this test is a twin (Note [Test labels]).
inline std::string trainer_binary() {
  const bool twin = fs::read_symlink("/proc/self/exe").string().ends_with("_twin");
  return std::string(TRAINER_BINARY_DIR) + (twin ? "/trainer_twin" : "/trainer");
}

// Starts the trainer binary on `cfg` with extra --set overrides; stdout goes to /dev/null.
// (A fork that keeps running this process's code could deadlock in the OpenMP runtime.)
inline pid_t spawn_trainer(const fs::path& cfg, const std::vector<std::string>& sets) {
  const std::string trainer = trainer_binary();
  std::vector<std::string> args = {trainer, "--config", cfg.string()};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  pid_t child = fork();
  if (child == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, STDOUT_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(trainer.c_str(), argv.data());
    _exit(127);
  }
  return child;
}

// Rewrites the latest checkpoint of `run` (a one-process run) with the first element of
// parameter `param` set to `value`, through the trainer's own load and save.
inline void poison_checkpoint(const fs::path& run, const std::string& param, float value) {
  const Checkpoint ckpt = open_checkpoint(latest_checkpoint(run));
  Config c;
  c.merge_yaml(ckpt.config_yaml, "config.yaml");
  const RunConfig rc = resolve_run(c);
  nn::Transformer model(rc.model, rc.exec);
  auto comm = dist::make_single_process_communicator();
  dist::ParallelConfig pc;
  pc.sharding = rc.sharding;
  pc.adamw = rc.adamw;
  auto dp = dist::make_data_parallel(*comm, model, pc);
  load_training_state(ckpt, model, *dp);
  const nn::ParamInfo* p = model.layout().find(param);
  ASSERT_NE(p, nullptr) << param;
  for (const nn::FlatSlice& sl : dp->slices())
    if (sl.begin <= p->offset && p->offset < sl.end)
      dp->masters().as<float>()[sl.local + (p->offset - sl.begin)] = value;
  save_checkpoint(*comm, run, model, *dp, ckpt.state, ckpt.config_yaml, read_file(ckpt.tokenizer),
                  {});
}

}  // namespace trainer::app::testing
