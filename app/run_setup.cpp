#include "app/run_setup.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "app/refusals.h"
#include "dist/network.h"
#include "nn/lora.h"
#include "nn/param_layout.h"
#include "nn/pipeline_split.h"
#include "nn/transformer.h"
#include "runtime/error.h"

namespace trainer::app {

namespace {

// "a" or "a-b" (inclusive) as [a, b], for 0 <= a <= b; nullopt when the text is neither.
std::optional<std::pair<int64_t, int64_t>> parse_range(const std::string& text) {
  int64_t a = -1, b = -1;
  const char* end = text.data() + text.size();
  std::from_chars_result r = std::from_chars(text.data(), end, a);
  if (r.ec == std::errc() && r.ptr != end && *r.ptr == '-')
    r = std::from_chars(r.ptr + 1, end, b);
  else
    b = a;
  if (r.ec != std::errc() || r.ptr != end || a < 0 || b < a) return std::nullopt;
  return std::pair{a, b};
}

// model.checkpoint_layers: entries "l" or "a-b" (inclusive).
std::vector<int> checkpoint_layers(const Config& c) {
  std::vector<int> layers;
  for (const std::string& entry : c.list("model.checkpoint_layers")) {
    const auto range = parse_range(entry);
    if (!range || range->second >= (1 << 16))
      throw UsageError(fmt::format(
          "model.checkpoint_layers: entry '{}' is not a block index or a range like 0-5", entry));
    for (int64_t l = range->first; l <= range->second; ++l) layers.push_back(int(l));
  }
  return layers;
}

// log.trace_steps: "", "s" or "a-b" (1-based steps, inclusive) within train.steps.
std::pair<int64_t, int64_t> trace_steps(const Config& c) {
  const std::string text = c.text("log.trace_steps");
  if (text.empty()) return {0, 0};
  const auto range = parse_range(text);
  if (!range || range->first < 1)
    throw UsageError(fmt::format(
        "log.trace_steps = '{}' is not a step or a range of steps like 20-22 (counted from 1)",
        text));
  const int64_t steps = c.integer("train.steps");
  if (range->second > steps)
    throw UsageError(
        fmt::format("log.trace_steps = '{}' ends beyond train.steps = {}", text, steps));
  return *range;
}

}  // namespace

bool is_frozen(const nn::ParamInfo& p, const RunConfig& r) {
  return matches_any(p.name, r.freeze) || nn::frozen_by_lora(r.model, p.role);
}

std::function<bool(const std::string&)> frozen_by_name(const nn::ParamLayout& layout,
                                                       const RunConfig& r) {
  return [&layout, &r](const std::string& name) {
    const nn::ParamInfo* p = layout.find(name);
    TRAINER_ASSERT(p, "is_frozen of {}, not a parameter", name);
    return is_frozen(*p, r);
  };
}

nn::ExecConfig exec_config(const Config& c, int max_rows, int max_seq_len) {
  nn::ExecConfig e;
  e.device = kDeviceNames.parse(c.text("run.device"));
  e.compute = nn::kPrecisionNames.parse(c.text("model.precision"));
  e.grad = nn::kGradDtypeNames.parse(c.text("dist.grad_dtype"));
  e.recompute = nn::kRecomputeNames.parse(c.text("model.activation_checkpointing"));
  e.recompute_layers = checkpoint_layers(c);
  e.attention_backward = nn::kAttentionBackwardNames.parse(c.text("train.attention_backward"));
  e.cuda_graphs = c.boolean("train.cuda_graphs");
  e.max_rows = max_rows;
  e.max_seq_len = max_seq_len;
  e.validate(model_config(c));
  return e;
}

namespace {

// The run's folder is run.dir/run.name: a name that is empty, a dot, absolute, holds a separator
// or is longer than a file name may be would put the run's files elsewhere (into run.dir
// itself, beside other runs, anywhere on the disk) or fail at the first write. Checked before
// anything is written.
void check_run_name(const std::string& name) {
  constexpr size_t kNameMax = 255;  // bytes of one path component on Linux filesystems
  std::string why;
  if (name.empty() || name == "." || name == "..")
    why = "is not a folder name";
  else if (name.find('/') != std::string::npos)
    why = "holds a path separator";
  else if (name.find('\0') != std::string::npos)
    why = "holds a NUL byte";
  else if (name.size() > kNameMax)
    why = fmt::format("is {} bytes long, more than the {} a file name may have", name.size(),
                      kNameMax);
  if (!why.empty())
    throw UsageError(fmt::format(
        "run.name '{}' {}: it names the run's own folder under run.dir (choose a plain name "
        "such as 'gpt-small')",
        name.size() > 64 ? name.substr(0, 64) + "..." : name, why));
}

// A save writes step-N.tmp and renames it step-N when complete; a .tmp left behind is either
// unfinished or complete but not renamed, and the next save prunes it. Resuming from one would
// start a run on a checkpoint that is about to be deleted (or never was whole).
void check_resume_source(const std::string& resume) {
  std::filesystem::path p = std::filesystem::path(resume).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // a trailing separator
  const std::string name = p.filename().string();
  if (name.starts_with("step-") && name.ends_with(".tmp"))
    throw UsageError(fmt::format(
        "train.resume = {} is a checkpoint whose save did not finish (a .tmp folder, which the "
        "next save deletes): resume from the run ('auto' or its latest), or, if its files are "
        "whole, rename it without .tmp first (they are checked when loaded)",
        resume));
}

// Sequence parallelism cuts each micro-batch's B x T tokens into dist.tensor_parallel equal
// slices: every batch shape the run will see must cut.
void check_sequence_parallel(const RunConfig& r) {
  if (!r.sequence_parallel) return;
  const int n = r.tensor_parallel;
  std::vector<int64_t> lengths = {r.train_data.seq_len};
  for (const auto& [step, v] : r.seq_len_schedule.entries) lengths.push_back(v);
  for (int64_t t : lengths)
    if (int64_t(r.train_data.batch_size) * t % n != 0)
      throw UsageError(fmt::format(
          "dist.sequence_parallel: a batch of {} x {} tokens does not cut into "
          "dist.tensor_parallel = {} equal slices (make data.batch_size x data.seq_len, and "
          "every train.seq_len_schedule length, a multiple of {})",
          r.train_data.batch_size, t, n, n));
}

}  // namespace

void check_training_paths(const Config& c) {
  check_run_name(c.text("run.name"));
  check_resume_source(c.text("train.resume"));
}

nn::AdamWConfig adamw_config(const Config& c) {
  // Decoupled decay multiplies the matrices by 1 - lr x weight_decay at the peak rate.
  const double shrink = c.real("optimizer.lr") * c.real("optimizer.weight_decay");
  if (shrink >= 1)
    throw UsageError(fmt::format(
        "optimizer.lr x optimizer.weight_decay = {} must stay below 1: each step multiplies the "
        "matrices by 1 - lr x weight_decay, which would zero or flip them",
        shrink));
  return {.beta1 = float(c.real("optimizer.beta1")),
          .beta2 = float(c.real("optimizer.beta2")),
          .eps = float(c.real("optimizer.eps")),
          .weight_decay = float(c.real("optimizer.weight_decay")),
          .decay_embeddings = c.boolean("optimizer.decay_embeddings")};
}

nn::LrSchedule lr_schedule(const Config& c) {
  nn::LrSchedule s;
  s.max_lr = float(c.real("optimizer.lr"));
  s.min_lr = float(c.real("optimizer.min_lr"));
  s.warmup_steps = c.integer("schedule.warmup_steps");
  s.total_steps = c.integer("train.steps");
  s.decay_steps = c.integer("schedule.decay_steps");
  s.decay = nn::kDecayNames.parse(c.text("schedule.decay"));
  s.validate();
  return s;
}

data::LoaderConfig loader_config(const Config& c, const std::string& split) {
  data::LoaderConfig l;
  l.data_dir = c.text("data.path");
  l.split = split;
  l.mode = data::kModeNames.parse(c.text("data.mode"));
  l.batch_size = int(c.integer("data.batch_size"));
  l.seq_len = int(c.integer("data.seq_len"));
  l.max_tokens = c.integer("data.max_tokens");
  if (l.max_tokens == 0) l.max_tokens = int64_t(l.batch_size) * l.seq_len;
  l.seed = uint64_t(c.integer("run.seed"));
  l.drop_last = c.boolean("data.drop_last");
  l.prefetch = int(c.integer("data.prefetch"));
  l.max_epochs = c.integer("data.epochs");
  l.verify = data::kVerifyNames.parse(c.text("data.verify_checksums"));
  l.vocab_size = uint32_t(c.integer("model.vocab_size"));
  if (l.seq_len > c.integer("model.max_seq_len"))
    throw UsageError(fmt::format("data.seq_len = {} exceeds model.max_seq_len = {}", l.seq_len,
                                 c.integer("model.max_seq_len")));
  return l;
}

int model_rows(const data::LoaderConfig& l) {
  if (l.mode != data::Mode::bucket) return l.batch_size;
  return int((l.max_tokens + l.seq_len - 1) / l.seq_len);
}

int64_t StepSchedule::at(int64_t step, int64_t fallback) const {
  int64_t value = fallback;
  for (const auto& [from, v] : entries)
    if (from <= step) value = v;
  return value;
}

StepSchedule parse_schedule(const Config& c, const std::string& key) {
  StepSchedule s;
  int64_t last_step = -1;
  for (const std::string& entry : c.list(key)) {
    const size_t colon = entry.find(':');
    int64_t at = 0, v = 0;
    bool ok = colon != std::string::npos;
    if (ok) {
      auto [p1, e1] = std::from_chars(entry.data(), entry.data() + colon, at);
      auto [p2, e2] = std::from_chars(entry.data() + colon + 1, entry.data() + entry.size(), v);
      ok = e1 == std::errc() && p1 == entry.data() + colon && e2 == std::errc() &&
           p2 == entry.data() + entry.size() && colon > 0;
    }
    if (!ok) throw UsageError(fmt::format("{}: entry '{}' is not step:value", key, entry));
    if (at <= last_step || at < 0 || v <= 0)
      throw UsageError(
          fmt::format("{}: entry '{}': steps must increase and values be positive", key, entry));
    last_step = at;
    s.entries.push_back({at, v});
  }
  return s;
}

std::filesystem::path run_dir_of(const Config& c) {
  return std::filesystem::path(c.text("run.dir")) / c.text("run.name");
}

namespace {

// dist.*: the grid's degrees, the pipeline's schedule and layers, sharding and the
// communication options, as stated.
void read_dist(const Config& c, RunConfig& r) {
  r.tensor_parallel = int(c.integer("dist.tensor_parallel"));
  r.sequence_parallel = c.boolean("dist.sequence_parallel");
  r.pipeline_parallel = int(c.integer("dist.pipeline_parallel"));
  r.pipeline_schedule = dist::kPipelineScheduleNames.parse(c.text("dist.pipeline_schedule"));
  r.pipeline_chunks = int(c.integer("dist.pipeline_virtual_stages"));
  for (const std::string& entry : c.list("dist.pipeline_layers")) {
    int v = 0;
    auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), v);
    if (ec != std::errc() || end != entry.data() + entry.size())
      throw UsageError(
          fmt::format("dist.pipeline_layers: entry '{}' is not a number of layers", entry));
    r.pipeline_layers.push_back(v);
  }
  r.sharding = dist::kShardingStageNames.parse(c.text("dist.sharding"));
  r.reshard_after_forward = c.boolean("dist.reshard_after_forward");
  r.bucket_mb = c.real("dist.bucket_mb");
  r.timeout_s = c.real("dist.timeout_s");
  r.interface = c.text("dist.interface");
  dist::check_interface_setting(r.interface);
  r.join = dist::kJoinModeNames.parse(c.text("dist.join"));
  r.backend = kBackendNames.parse(c.text("dist.backend"));
  r.deterministic = c.boolean("dist.deterministic");
}

// train.*, checkpoint.* and log.*: the schedule of batches, what the loop does, as stated.
void read_loop(const Config& c, RunConfig& r) {
  r.adamw = adamw_config(c);
  r.schedule = lr_schedule(c);
  r.grad_clip = float(c.real("optimizer.grad_clip"));
  r.steps = c.integer("train.steps");
  r.grad_accum = c.integer("train.grad_accum");
  r.global_batch = c.integer("train.global_batch");
  r.grad_accum_schedule = parse_schedule(c, "train.grad_accum_schedule");
  r.seq_len_schedule = parse_schedule(c, "train.seq_len_schedule");
  r.freeze = c.list("train.freeze");
  r.on_nonfinite = kNonFiniteNames.parse(c.text("train.on_nonfinite"));
  r.max_consecutive_skips = c.integer("train.max_consecutive_skips");
  r.max_skips = c.integer("train.max_skips");
  r.spike_guard = {.action = kSpikeActionNames.parse(c.text("train.spike_guard.action")),
                   .metric = kSpikeMetricNames.parse(c.text("train.spike_guard.metric")),
                   .window = c.integer("train.spike_guard.window"),
                   .threshold = c.real("train.spike_guard.threshold")};
  r.resume = c.text("train.resume");
  r.init_from = c.text("train.init_from");
  r.val_every = c.integer("train.val_every");
  r.val_batches = c.integer("train.val_batches");
  r.eval_tasks = c.list("train.eval_tasks");
  r.eval_tasks_every = c.integer("train.eval_tasks_every");
  r.checkpoint_every = c.integer("checkpoint.every");
  r.keep_last = c.integer("checkpoint.keep_last");
  r.keep_every = c.integer("checkpoint.keep_every");
  r.checkpoint_timeout_s = c.real("checkpoint.timeout_s");
  r.checkpoint_async = c.boolean("checkpoint.async");
  r.log_every = c.integer("log.every");
  std::tie(r.trace_first, r.trace_last) = trace_steps(c);
  r.log_level = log::kLevelNames.parse(c.text("log.level"));
  r.log_all_ranks = c.boolean("log.all_ranks");
  r.tensorboard = c.boolean("log.tensorboard");
  r.memory_check = kMemoryCheckNames.parse(c.text("train.memory_check"));
  r.progress = kProgressNames.parse(c.text("log.progress"));
  r.peak_gflops = c.real("log.peak_gflops");
}

// What follows from the options and the model's shape, each check naming what does not fit:
// the tensor-parallel cut, the pipeline's stages, the schedules' lengths, the freeze patterns.
void derive(RunConfig& r) {
  // Whether the model cuts evenly (rank 0's slice: every rank's cuts alike), before anything
  // runs; run_training sets the rank's own slice.
  r.model.tensor = {r.tensor_parallel, 0, r.sequence_parallel};
  r.model.validate();
  (void)nn::arch_spec(r.model);  // each parameter's cut (slice_spec)
  r.pipeline_split =
      nn::pipeline_split(r.model, r.pipeline_parallel, r.pipeline_chunks, r.pipeline_layers);
  r.exec.own_params = r.sharding == dist::ShardingStage::none;  // else the shards hold them
  nn::Transformer::check_plan_magnitude(r.model, r.exec);
  check_sequence_parallel(r);
  for (const auto& [step, v] : r.seq_len_schedule.entries)
    if (v > r.train_data.seq_len)
      throw UsageError(fmt::format(
          "train.seq_len_schedule: entry '{}:{}' exceeds data.seq_len = {} (rows are at most that "
          "long)",
          step, v, r.train_data.seq_len));
  for (const auto& [step, v] : r.grad_accum_schedule.entries)
    if (v > (1 << 16))
      throw UsageError(fmt::format(
          "train.grad_accum_schedule: entry '{}:{}' exceeds 65536 micro-batches", step, v));
  // Asked of the whole model: a pipeline stage may hold none of a pattern's parameters.
  const nn::ParamLayout whole(r.model.whole());
  for (const std::string& p : r.freeze)
    if (std::none_of(whole.params().begin(), whole.params().end(),
                     [&](const nn::ParamInfo& info) { return matches_any(info.name, {p}); }))
      throw UsageError(fmt::format("train.freeze: pattern '{}' matches no parameter", p));
}

}  // namespace

int64_t most_micro_batches(const RunConfig& r, int data_ranks) {
  int64_t most = r.global_batch > 0 ? r.global_batch : r.grad_accum;
  for (const auto& [step, v] : r.grad_accum_schedule.entries) most = std::max(most, v);
  return r.global_batch > 0 ? most / data_ranks : most;
}

int held_micro_batches(const RunConfig& r, dist::PipelineSchedule schedule, int chunks, int stage,
                       int data_ranks) {
  const int64_t M = dist::pipeline_micro_batches(schedule, r.pipeline_parallel,
                                                 most_micro_batches(r, data_ranks));
  return dist::max_in_flight(
      dist::pipeline_actions(schedule, r.pipeline_parallel, stage, int(M), chunks));
}

RunConfig resolve_run(const Config& c) {
  RunConfig r;
  r.run_dir = run_dir_of(c);
  r.seed = uint64_t(c.integer("run.seed"));
  r.model = model_config(c);
  r.train_data = loader_config(c, "train");
  read_mixture(c, r.train_data, r.source_names);
  r.val_sets = val_sets(c, r.train_data, r.source_names);
  r.tokenizer = c.text("data.tokenizer");
  r.exec = exec_config(c, model_rows(r.train_data), r.train_data.seq_len);
  read_dist(c, r);
  read_loop(c, r);
  check_combinations(r);  // Note [Refusals] in app/refusals.cpp
  derive(r);
  return r;
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  // Glob with '*' only: iterative matcher with backtracking to the last star.
  auto match = [](const std::string& s, const std::string& p) {
    size_t i = 0, j = 0, star = std::string::npos, mark = 0;
    while (i < s.size()) {
      if (j < p.size() && p[j] == '*') {
        star = j++;
        mark = i;
      } else if (j < p.size() && p[j] == s[i]) {
        ++i, ++j;
      } else if (star != std::string::npos) {
        j = star + 1;
        i = ++mark;
      } else {
        return false;
      }
    }
    while (j < p.size() && p[j] == '*') ++j;
    return j == p.size();
  };
  for (const std::string& p : patterns)
    if (match(name, p)) return true;
  return false;
}

}  // namespace trainer::app
