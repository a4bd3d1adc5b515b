// The resolved configuration as typed structs, built once at start-up from the Config (which
// stays the source of truth for YAML, overrides and the copy saved with each run): no layer
// below app/, and no step of the training loop, reads a key by name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "app/config.h"
#include "app/data_keys.h"
#include "app/model_keys.h"
#include "app/progress_mode.h"
#include "app/spike_guard.h"
#include "data/loader.h"
#include "dist/data_parallel.h"
#include "dist/join.h"
#include "dist/pipeline_schedule.h"
#include "nn/adamw.h"
#include "nn/lr_schedule.h"
#include "nn/model_config.h"
#include "runtime/enum_names.h"
#include "runtime/log.h"

namespace trainer::app {

// A "step:value" schedule: from each listed step on, the value in force.
struct StepSchedule {
  std::vector<std::pair<int64_t, int64_t>> entries;  // (step, value), steps increasing
  // The value in force at `step` (the last entry whose step <= it), or `fallback` before the
  // first entry.
  int64_t at(int64_t step, int64_t fallback) const;
};

enum class NonFinite { stop, skip };
inline constexpr EnumNames<NonFinite, 2> kNonFiniteNames{
    "train.on_nonfinite", {{{NonFinite::stop, "stop"}, {NonFinite::skip, "skip"}}}};

// train.memory_check: a memory plan above what is available refuses the start, or warns.
enum class MemoryCheck : uint8_t { refuse, warn };
inline constexpr EnumNames<MemoryCheck, 2> kMemoryCheckNames{
    "train.memory_check", {{{MemoryCheck::refuse, "refuse"}, {MemoryCheck::warn, "warn"}}}};

// dist.backend: MPI between CPU ranks and NCCL between 2+ GPUs (automatic), or NCCL even for
// one GPU.
enum class Backend : uint8_t { automatic, nccl };
inline constexpr EnumNames<Backend, 2> kBackendNames{
    "dist.backend", {{{Backend::automatic, "auto"}, {Backend::nccl, "nccl"}}}};

struct RunConfig {
  std::filesystem::path run_dir;  // run.dir / run.name
  uint64_t seed = 0;
  nn::ModelConfig model;
  nn::ExecConfig exec;                    // sized for the training micro-batch
  data::LoaderConfig train_data;          // with data.sources: its mixture
  std::vector<std::string> source_names;  // data.sources' names (empty: data.path alone)
  std::vector<ValSet> val_sets;           // at least one
  std::filesystem::path tokenizer;        // data.tokenizer
  nn::AdamWConfig adamw;
  nn::LrSchedule schedule;
  float grad_clip = 0;
  int64_t steps = 0, grad_accum = 1;
  int64_t global_batch = 0;  // micro-batches per step over all ranks (0: grad_accum per rank)
  StepSchedule grad_accum_schedule, seq_len_schedule;  // the former in global_batch's unit when set
  std::vector<std::string> freeze;
  NonFinite on_nonfinite = NonFinite::stop;
  int64_t max_consecutive_skips = 0, max_skips = 0;  // skip's limits
  SpikeGuard::Policy spike_guard;
  std::string resume;               // "auto", "none" or a checkpoint directory
  std::filesystem::path init_from;  // fine-tuning's source (empty: initialise by the seed)
  int64_t val_every = 0, val_batches = 0;
  std::vector<std::string> eval_tasks;  // task files (app/task_eval.h)
  int64_t eval_tasks_every = 0;
  int64_t checkpoint_every = 0, keep_last = 0, keep_every = 0;
  double checkpoint_timeout_s = 0;
  bool checkpoint_async = false;  // Note [Asynchronous checkpoints]
  int64_t log_every = 1;
  int64_t trace_first = 0, trace_last = 0;  // log.trace_steps, 1-based (0: none; Note [Traces])
  log::Level log_level = log::Level::info;
  bool log_all_ranks = false;  // every rank writes <run>/logs/rank-R.log
  bool tensorboard = false;    // rank 0 writes <run>/tensorboard/events.out.tfevents.*
  MemoryCheck memory_check = MemoryCheck::refuse;
  ProgressMode progress = ProgressMode::automatic;
  double peak_gflops = 0;  // the MFU reference; 0 = measured at start-up
  double bucket_mb = 0, timeout_s = 0;
  std::string interface;  // dist.interface
  Backend backend = Backend::automatic;
  int tensor_parallel = 1;         // dist.tensor_parallel (Note [Parallel grid])
  bool sequence_parallel = false;  // dist.sequence_parallel (Note [Sequence parallelism])
  // dist.pipeline_*: stages, their schedule and chunks, and each virtual stage's layers
  // (Note [Pipeline stages]); the model's slice is set per rank by run_training.
  int pipeline_parallel = 1;
  dist::PipelineSchedule pipeline_schedule = dist::PipelineSchedule::one_f_one_b;
  int pipeline_chunks = 1;
  std::vector<int> pipeline_layers;  // as stated; empty: stages balanced by compute
  std::vector<std::pair<int, int>> pipeline_split;
  dist::ShardingStage sharding = dist::ShardingStage::none;
  bool reshard_after_forward = true;
  dist::JoinMode join = dist::JoinMode::enabled;
  bool deterministic = false;  // dist.deterministic (Note [World-size-invariant sums])
};

// The most micro-batches a data-parallel rank runs in a step (train.grad_accum, or its share of
// train.global_batch, over their schedules); a pipeline may run more
// (dist::pipeline_micro_batches).
int64_t most_micro_batches(const RunConfig& r, int data_ranks);
// The micro-batches stage `stage` holds at once under `schedule` with `chunks` per stage, at
// the most micro-batches a step of `r` runs on `data_ranks` (its activation slots).
int held_micro_batches(const RunConfig& r, dist::PipelineSchedule schedule, int chunks, int stage,
                       int data_ranks);

// Everything the training job needs from `c`, checked; throws UsageError naming the key.
RunConfig resolve_run(const Config& c);
// Whether parameter `p` is kept fixed in the run `r` describes: train.freeze matches it, or it
// is a base parameter under LoRA (Note [LoRA] in nn/lora.h).
bool is_frozen(const nn::ParamInfo& p, const RunConfig& r);
// The same by the name of a parameter of `layout` (dist::ParallelConfig::is_frozen), for as
// long as both live.
std::function<bool(const std::string&)> frozen_by_name(const nn::ParamLayout& layout,
                                                       const RunConfig& r);

// run.dir/run.name: where the run keeps its checkpoints, logs and metrics.
std::filesystem::path run_dir_of(const Config& c);
// What only starting a training run asks of `c`, before anything is written: run.name is a
// plain folder name and train.resume no unfinished save. (Kept out of resolve_run, which also
// reads the configs stored with older runs for eval, sample and export.)
void check_training_paths(const Config& c);

// How the model runs (precision, gradient dtype, checkpointing) for batches of up to
// max_rows x max_seq_len tokens.
nn::ExecConfig exec_config(const Config& c, int max_rows, int max_seq_len);
nn::AdamWConfig adamw_config(const Config& c);
nn::LrSchedule lr_schedule(const Config& c);
data::LoaderConfig loader_config(const Config& c, const std::string& split);
// The rows the model is sized for: batch_size, or the token budget over seq_len (bucket mode).
int model_rows(const data::LoaderConfig& l);

// The schedule under `key` ("step:value" entries). Throws a UsageError naming the key on a
// malformed entry, steps that do not increase, or a value that is not positive.
StepSchedule parse_schedule(const Config& c, const std::string& key);

// True when `name` matches one of the glob patterns (only '*' is special).
bool matches_any(const std::string& name, const std::vector<std::string>& patterns);

}  // namespace trainer::app
