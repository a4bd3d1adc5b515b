#include "app/train_loop.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>

#include "app/checkpoint.h"
#include "app/init_from.h"
#include "app/memory_plan.h"
#include "app/metrics.h"
#include "app/nonfinite.h"
#include "app/run_setup.h"
#include "app/stop_signals.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "dist/consistency.h"
#include "dist/data_parallel.h"
#include "dist/exact_norm.h"
#include "dist/join.h"
#include "dist/launch.h"
#include "dist/step_stats.h"
#include "nn/adamw.h"
#include "nn/transformer.h"
#include "runtime/cuda_stream.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/fallback.h"
#include "runtime/file_io.h"
#include "runtime/gemm.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/rng.h"
#include "runtime/timer.h"

#include <nlohmann/json.hpp>

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

constexpr double kMiB = 1048576.0;

// A test's way to make one rank fail with an error of its own at a step
// (TRAINER_TEST_FAULT=<rank>:<step>), standing in for a fault only that rank sees (its disk,
// its device): the job must end, and rank 0's train.log with that rank's error.
void test_fault(int rank, int64_t step) {
  static const char* env = std::getenv("TRAINER_TEST_FAULT");
  if (env && fmt::format("{}:{}", rank, step) == env)
    THROW_ERROR("TRAINER_TEST_FAULT: rank {} fails at step {}", rank, step);
}

// A batch cut to its first `t` positions (sequence-length curriculum).
void truncate_batch(data::Batch& b, int t) {
  if (t >= b.T) return;
  auto cut = [&](std::vector<int32_t>& v) {
    if (v.empty()) return;
    std::vector<int32_t> out(size_t(b.B) * t);
    for (int r = 0; r < b.B; ++r)
      std::copy_n(v.begin() + int64_t(r) * b.T, t, out.begin() + int64_t(r) * t);
    v.swap(out);
  };
  cut(b.tokens);
  cut(b.targets);
  cut(b.segments);
  for (int32_t& len : b.lengths) len = std::min(len, t);
  b.T = t;
  b.loss_tokens = 0;
  for (int32_t x : b.targets) b.loss_tokens += x >= 0;
}

nn::BatchView view_of(const data::Batch& b) {
  return {b.B,
          b.T,
          b.tokens.data(),
          b.targets.data(),
          b.segments.empty() ? nullptr : b.segments.data(),
          b.lengths.empty() ? nullptr : b.lengths.data()};
}

struct StepStats {
  int seq_len = 0;     // the step's row length (the curriculum may shorten it)
  double loss = 0;     // mean over the global batch's tokens
  int64_t tokens = 0;  // loss tokens of the global batch
  double grad_norm = 0;
  float lr = 0;
  bool skipped = false;
  bool stop_requested = false;  // a signal reached some rank
  bool write_failed = false;    // rank 0 could not write its metrics or log
  dist::StepTimes times;
};

// Ranges of the flat parameter buffer matched by the freeze patterns.
std::vector<dist::Range> frozen_ranges(const nn::ParamLayout& layout,
                                       const std::vector<std::string>& patterns) {
  std::vector<dist::Range> out;
  for (const nn::ParamInfo& p : layout.params())
    if (matches_any(p.name, patterns)) out.push_back({p.offset, p.offset + p.numel});
  return out;
}

// Keys that give the loader's saved position its meaning, and keys that define the model
// without changing tensor shapes (n_head): changing either on resume is refused.
void check_resumable(const Config& now, const Checkpoint& ckpt) {
  Config then;
  then.merge_yaml(ckpt.config_yaml, (ckpt.dir / "config.yaml").string());
  // A config that does not fit the checkpoint is the user's to change: a usage error (exit 2).
  for (const char* key : {"run.seed", "data.mode", "data.batch_size", "data.seq_len",
                          "data.max_tokens", "data.drop_last"})
    if (then.to_yaml_value(key) != now.to_yaml_value(key))
      throw UsageError(fmt::format(
          "cannot resume from {}: {} was {} there but is {} now (it defines the data order)",
          ckpt.dir.string(), key, then.to_yaml_value(key), now.to_yaml_value(key)));
  for (const char* key : model_keys())
    if (then.to_yaml_value(key) != now.to_yaml_value(key))
      throw UsageError(fmt::format(
          "cannot resume from {}: {} was {} there but is {} now (another model; start a new "
          "run, or set train.resume=none with --force)",
          ckpt.dir.string(), key, then.to_yaml_value(key), now.to_yaml_value(key)));
}

// The GPU run_training chose for this rank, and the stream the model's work goes to.
struct GpuChoice {
  int device = -1;
  void* stream = nullptr;
};

// The run's resolved config, on the chosen GPU when it runs on CUDA.
// What MFU is measured against: log.peak_gflops, or a GEMM peak measured before the model
// allocates (its matrices would otherwise add to the run's peak memory, beyond its plan).
struct PeakReference {
  double gflops = 0;
  std::string source;
};

PeakReference peak_reference(const RunConfig& rc) {
  if (rc.peak_gflops > 0)
    return {rc.peak_gflops,
            fmt::format("log.peak_gflops = {:.0f} GFLOP/s (stated)", rc.peak_gflops)};
  const GemmPeak p = measure_gemm_peak_stable(nn::context_for(rc.exec), rc.exec.compute);
  return {p.gflops,
          fmt::format(
              "a {} GEMM peak of {:.0f} GFLOP/s measured at start-up ({}; set log.peak_gflops to "
              "fix it)",
              float_dtype_name(rc.exec.compute), p.gflops,
              p.stable ? fmt::format("stable within 3% over {} rounds", p.rounds)
                       : fmt::format("still changing after {} rounds: a busy machine?", p.rounds))};
}

RunConfig resolve_on_device(const Config& config, const GpuChoice& gpu) {
  RunConfig rc = resolve_run(config);
  if (rc.exec.device == Device::cuda) {
    rc.exec.device_index = gpu.device;
    rc.exec.stream = gpu.stream;
  }
  return rc;
}

class TrainLoop {
 public:
  // `rc`: `config` resolved for this rank's device.
  TrainLoop(const Config& config, RunConfig rc, const TrainOptions& options,
            dist::Communicator& comm, const PeakReference& peak);
  int run();

 private:
  void check_batch_over_ranks() const;
  void warn_of_changes(const Checkpoint& ckpt) const;
  int64_t micro_batches(int64_t step) const;
  void start_up();
  fs::path resume_path();
  fs::path init_path();
  std::string from_leader(std::string text);
  std::vector<fs::path> check_overwrite(const fs::path& from, int64_t start_step);
  void check_data();
  std::optional<std::vector<data::Batch>> next_step_batches(int micro);
  StepStats train_step(const std::optional<std::vector<data::Batch>>& batches,
                       const dist::StepCounts& counts);
  void finish_gradients(StepStats& s);
  std::string write_failure() const;
  double validate();
  void save();
  void log_step(const StepStats& s, double step_s);
  void write_metrics(const nlohmann::json& record);
  void report_write_failure();
  int stop_early(const std::string& why, int exit_code);
  void mark_stopped();
  void log_setup();
  double planned_mib() const;

  Config config_;  // as given (paths made absolute): saved with the run, compared across ranks
  RunConfig rc_;   // the same, resolved once
  TrainOptions options_;
  dist::Communicator& comm_;
  bool leader_;  // rank 0 writes metrics, logs and checkpoints
  std::unique_ptr<ExclusiveLock> lock_;
  std::string tokenizer_;  // the tokenizer's bytes, kept in the run and every checkpoint
  uint64_t tokenizer_hash_ = 0;
  std::string data_manifest_;  // the corpus's manifest.json as the run started
  nn::Transformer transformer_;
  nn::Model& model_;                        // what the loop uses of it
  std::unique_ptr<dist::DataParallel> dp_;  // how the ranks share its state
  dist::Join join_;
  std::unique_ptr<data::Loader> loader_;
  TrainerState state_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> progress_;
  PeakReference peak_;
  int64_t saved_step_ = -1;  // the step of the checkpoint written or resumed from last
  bool val_verified_ = false;
  bool metrics_failed_ = false, write_failure_reported_ = false;
  Timer run_timer_;
  int64_t first_step_ = 0;
  dist::CommStats comm_logged_;      // the communicator's totals at the last metrics line
  dist::StragglerWatch stragglers_;  // rank 0: the current streak of one lagging rank
  NonFiniteGuard nonfinite_;         // what a step or a save does with NaN and Inf
};

TrainLoop::TrainLoop(const Config& config, RunConfig rc, const TrainOptions& options,
                     dist::Communicator& comm, const PeakReference& peak)
    : config_(config),
      rc_(std::move(rc)),
      options_(options),
      comm_(comm),
      leader_(comm.rank() == 0),
      transformer_(rc_.model, rc_.exec),
      model_(transformer_),
      dp_(dist::make_data_parallel(
          comm, model_,
          {.stage = rc_.sharding,
           .bucket_mb = rc_.bucket_mb,
           .reshard_after_forward = rc_.reshard_after_forward,
           .adamw = rc_.adamw,
           .deterministic = rc_.deterministic,
           .frozen = frozen_ranges(model_.layout(), rc_.freeze),
           .is_frozen =
               [this](const std::string& name) { return matches_any(name, rc_.freeze); }})),
      join_(rc_.join),
      peak_(peak),
      nonfinite_(comm, model_, *dp_, {rc_.on_nonfinite, rc_.max_consecutive_skips, rc_.max_skips}) {
  check_batch_over_ranks();
  for (const std::string& p : rc_.freeze) {
    bool any = false;
    for (const nn::ParamInfo& info : model_.layout().params()) any |= matches_any(info.name, {p});
    if (!any) throw UsageError(fmt::format("train.freeze: pattern '{}' matches no parameter", p));
  }
}

// train.global_batch (and its schedule) must share out evenly; dist.deterministic's trees need
// a power-of-two world.
void TrainLoop::check_batch_over_ranks() const {
  const int w = comm_.size();
  if (rc_.deterministic && (w & (w - 1)) != 0)
    throw UsageError(fmt::format(
        "dist.deterministic needs a power-of-two number of ranks (its reduction tree pairs "
        "them), not {}",
        w));
  if (rc_.global_batch == 0) return;
  std::vector<std::pair<int64_t, int64_t>> sizes = {{0, rc_.global_batch}};
  for (const auto& e : rc_.grad_accum_schedule.entries) sizes.push_back(e);
  for (const auto& [step, g] : sizes)
    if (g % w != 0)
      throw UsageError(fmt::format(
          "train.global_batch{}: {} micro-batches do not share out over {} ranks (use a multiple "
          "of the number of ranks)",
          step > 0 ? fmt::format(" from step {}", step) : "", g, w));
}

// Resuming on another number of ranks without train.global_batch changes the global batch.
void TrainLoop::warn_of_changes(const Checkpoint& ckpt) const {
  // oneDNN's products split their sums by thread: another count gives other bits from here.
  const Context& ctx = model_.context();
  if (leader_ && ctx.device == Device::cpu && ckpt.state.threads > 0 &&
      ckpt.state.threads != op_threads(ctx))
    log::warn(
        "resuming a run saved with {} CPU threads per rank on {}: the products sum in another "
        "order, so the steps from here are not the bits the run would have given{} "
        "(OMP_NUM_THREADS={} keeps them)",
        ckpt.state.threads, op_threads(ctx),
        rc_.deterministic ? ", dist.deterministic notwithstanding" : "", ckpt.state.threads);
  if (rc_.global_batch > 0 || ckpt.state.world_size == comm_.size() || !leader_) return;
  log::warn(
      "resuming a {}-rank run on {} ranks with train.grad_accum per rank: the global batch "
      "changes from {} to {} micro-batches per step (set train.global_batch to keep it)",
      ckpt.state.world_size, comm_.size(), micro_batches(state_.step) * ckpt.state.world_size,
      micro_batches(state_.step) * comm_.size());
}

// This rank's micro-batches at `step`: train.grad_accum (or its schedule), or its share of
// train.global_batch (or its schedule).
int64_t TrainLoop::micro_batches(int64_t step) const {
  if (rc_.global_batch == 0) return rc_.grad_accum_schedule.at(step, rc_.grad_accum);
  return rc_.grad_accum_schedule.at(step, rc_.global_batch) / comm_.size();
}

// Rank 0 chooses the checkpoint to resume from and every rank opens that one, so ranks
// without a shared view of `latest` cannot start from different states.
fs::path TrainLoop::resume_path() {
  std::string path;
  if (leader_) {
    if (rc_.resume == "auto")
      path = latest_checkpoint(rc_.run_dir).string();
    else if (rc_.resume != "none")
      path = checkpoint_dir_of(rc_.resume).string();
  }
  return from_leader(path);
}

// The same for train.init_from: a run directory (a live one too) means the checkpoint its
// `latest` names when rank 0 looks; a checkpoint or an export is itself.
fs::path TrainLoop::init_path() {
  fs::path path = rc_.init_from;
  std::error_code ec;
  if (leader_ && fs::is_directory(path, ec) && !fs::exists(path / "manifest.json", ec) &&
      !fs::exists(path / "trainer_config.yaml", ec))
    if (const fs::path latest = latest_checkpoint(path); !latest.empty()) path = latest;
  return from_leader(path.string());
}

// Rank 0's `text` on every rank (a collective).
std::string TrainLoop::from_leader(std::string text) {
  if (comm_.size() == 1) return text;
  int64_t n = int64_t(text.size());
  comm_.broadcast(&n, sizeof n);
  text.resize(size_t(n));
  if (n > 0) comm_.broadcast(text.data(), n);
  return text;
}

// Note [One run per directory]: what this start would discard of the run directory's earlier
// run. Continuing from the run's own checkpoint discards nothing (metrics logged after it are
// rewritten as the steps are redone); starting afresh, or from another run's checkpoint,
// would mix with or replace everything the directory holds; rewinding to an older checkpoint
// of the run would replace its later ones. Any of those is refused unless --force, which
// deletes them once every other check has passed. Returns what --force is to delete.
std::vector<fs::path> TrainLoop::check_overwrite(const fs::path& from, int64_t start_step) {
  const fs::path ckpts = rc_.run_dir / "checkpoints", metrics = rc_.run_dir / "metrics.jsonl";
  std::error_code ec;
  const bool own = !from.empty() &&
                   fs::weakly_canonical(from.parent_path(), ec) == fs::weakly_canonical(ckpts, ec);
  std::vector<fs::path> discard;
  for (const auto& [step, dir] : list_checkpoints(rc_.run_dir))
    if (!own || step > start_step) discard.push_back(dir);
  const bool has_metrics = fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0;
  if (!own && has_metrics) discard.push_back(metrics);
  if (discard.empty()) return {};
  const std::string what =
      own ? fmt::format("resuming from step {} would replace its {} later checkpoint(s)",
                        start_step, discard.size())
      : from.empty()
          ? "this run starts afresh"
          : fmt::format("this run starts from {}, another run's checkpoint", from.string());
  if (!options_.force)
    throw UsageError(fmt::format(
        "{} already holds a run ({} checkpoint(s){}) and {}: pass --force to delete {} first, or "
        "choose another run.name",
        rc_.run_dir.string(), list_checkpoints(rc_.run_dir).size(),
        has_metrics ? ", metrics.jsonl" : "", what, own ? "them" : "that run"));
  return discard;
}

// Everything about the data that can fail later is checked before the first step.
void TrainLoop::check_data() {
  const data::Manifest& m = loader_->corpus().manifest();
  CHECK(data::tokenizer_is(tokenizer_, m.tokenizer_hash),
        "data.tokenizer = {} is not the tokenizer {} was prepared with (hash {:016x}, the "
        "manifest says {:016x}, {})",
        rc_.tokenizer.string(), rc_.train_data.data_dir.string(), tokenizer_hash_, m.tokenizer_hash,
        m.tokenizer_file);
  if (rc_.val_every == 0) return;
  // Every validation checks the shards' tokenizer (as the manifest records it: a corpus
  // prepared before the content hash records the hash of the file's bytes).
  rc_.val_data.tokenizer_hash = m.tokenizer_hash;
  std::optional<data::Batch> first;
  try {
    data::Loader val(rc_.val_data, comm_.rank(), comm_.size());
    first = val.next();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {  // what the user can fix by the key (an InternalError is no Error)
    throw UsageError(
        fmt::format("train.val_every = {} but the validation data cannot be read: "
                    "{} (set train.val_every=0 to train without validation)",
                    rc_.val_every, e.what()));
  }
  CHECK(first.has_value(),
        "train.val_every = {} but the val split of {} yields no batch of this shape on rank {} "
        "(prepare with a larger --val-fraction, or set train.val_every=0)",
        rc_.val_every, rc_.val_data.data_dir.string(), comm_.rank());
  // Under `all` its shards were checked just now; under first_use each validation checks what
  // it reads.
  val_verified_ = rc_.val_data.verify == data::Verify::all;
}

void TrainLoop::start_up() {
  if (leader_) {
    fs::create_directories(rc_.run_dir);
    try {
      lock_ = std::make_unique<ExclusiveLock>(rc_.run_dir / ".lock");
    } catch (const ExclusiveLock::Busy& busy) {
      THROW_ERROR(
          "run directory {} is in use by another trainer ({}): one trainer per run "
          "directory",
          rc_.run_dir.string(), busy.holder());
    }
  }
  if (leader_) finish_interrupted_saves(rc_.run_dir);  // before `latest` is read
  const fs::path tokenizer_path = rc_.tokenizer;
  if (!fs::is_regular_file(tokenizer_path))
    throw UsageError(fmt::format(
        "data.tokenizer = {} {}", tokenizer_path.string(),
        fs::is_directory(tokenizer_path)
            ? "is a directory, not a tokenizer model file (the .model that tokenizer train wrote)"
        : fs::exists(tokenizer_path) ? "is not a regular file"
                                     : "does not exist"));
  tokenizer_ = read_file(tokenizer_path);
  tokenizer_hash_ = data::tokenizer_hash(tokenizer_);
  data_manifest_ = read_file(rc_.train_data.data_dir / data::kManifestName);

  // Every check first (Note [One run per directory]): nothing in the run directory is written
  // or deleted until all of them, and the ranks' agreement, have passed.
  const fs::path from = resume_path();
  std::optional<Checkpoint> ckpt;
  if (!from.empty()) {
    ckpt = open_checkpoint(from);
    check_resumable(config_, *ckpt);
    if (!data::tokenizer_is(tokenizer_, ckpt->state.tokenizer_hash))
      throw UsageError(fmt::format(
          "cannot resume from {}: it was trained with tokenizer {:016x} but data.tokenizer = {} "
          "is {:016x}",
          from.string(), ckpt->state.tokenizer_hash, tokenizer_path.string(), tokenizer_hash_));
    if (ckpt->state.data_hash != 0 && ckpt->state.data_hash != hash64(data_manifest_))
      throw UsageError(fmt::format(
          "cannot resume from {}: the corpus in {} changed since it was saved (its manifest "
          "differs); the saved data position would point elsewhere",
          from.string(), rc_.train_data.data_dir.string()));
    state_ = ckpt->state;
    warn_of_changes(*ckpt);
  }
  // Fine-tuning starts a new run (not a resume) from saved weights; checked now, loaded below.
  std::optional<InitSource> init;
  if (!ckpt && !rc_.init_from.empty())
    init = open_init_source(init_path(), config_, tokenizer_hash_);
  const std::vector<fs::path> discard =
      leader_ ? check_overwrite(from, state_.step) : std::vector<fs::path>{};
  std::optional<data::LoaderState> loader_state;
  if (ckpt) loader_state = ckpt->state.loader.get<data::LoaderState>();
  loader_ =
      std::make_unique<data::Loader>(rc_.train_data, comm_.rank(), comm_.size(), loader_state);
  check_data();
  state_.tokenizer_hash = tokenizer_hash_;
  state_.data_hash = hash64(data_manifest_);
  state_.world_size = comm_.size();
  state_.threads = op_threads(model_.context());
  dist::check_consistency(
      comm_, {{"the resolved config",
               fmt::format("{}resumed at step: {}\n", config_.to_yaml(), state_.step)},
              {"the trainer binary", dist::binary_identity()},
              {"the data manifest", data_manifest_},
              {"the tokenizer", tokenizer_},
              {"the parameter layout", fmt::format("{:016x}", model_.layout().digest())}});

  if (leader_) {
    for (const fs::path& p : discard) {
      log::warn("--force: deleting {}", p.string());
      fs::remove_all(p);
    }
    if (ckpt && !discard.empty() && fs::is_symlink(rc_.run_dir / "checkpoints/latest"))
      repoint_latest(rc_.run_dir, ckpt->dir);
    log::set_file((rc_.run_dir / "train.log").string());
    fs::remove(rc_.run_dir / kStoppedMarker);  // an earlier launch's
    write_file_atomic(rc_.run_dir / "config.yaml", config_.to_yaml());
    write_file_atomic(rc_.run_dir / "tokenizer.model", tokenizer_);
  }
  if (!leader_) log::set_run_log((rc_.run_dir / "train.log").string());
  if (!leader_ && rc_.log_all_ranks) {
    fs::create_directories(rc_.run_dir / "logs");
    log::set_file((rc_.run_dir / "logs" / fmt::format("rank-{}.log", comm_.rank())).string());
  }
  if (ckpt) {
    load_training_state(*ckpt, model_, *dp_);
    saved_step_ = state_.step;
    log::info("resumed from {} at step {}", from.string(), state_.step);
  } else if (init) {
    load_init_weights(*init, model_, *dp_);
    log::info("fine-tuning from {}: its weights, a fresh optimizer, step 0", init->dir.string());
  } else {
    dist::init_masters(*dp_, model_, rc_.model, rc_.seed);
  }
  first_step_ = state_.step;
  if (leader_)
    metrics_ = std::make_unique<MetricsLog>(rc_.run_dir / "metrics.jsonl", ckpt ? state_.step : -1);
}

// This rank's micro-batches for the step. At the end of the data (data.epochs) a step gets the
// micro-batches that are left, fewer than asked for: none is dropped.
std::optional<std::vector<data::Batch>> TrainLoop::next_step_batches(int micro) {
  std::vector<data::Batch> batches;
  const int64_t seq = rc_.seq_len_schedule.at(state_.step, rc_.train_data.seq_len);
  for (int i = 0; i < micro; ++i) {
    std::optional<data::Batch> b = loader_->next();
    if (!b) break;
    truncate_batch(*b, int(seq));
    batches.push_back(std::move(*b));
  }
  if (batches.empty()) return std::nullopt;
  return batches;
}

// One optimizer step on the global batch (see DESIGN.md, "The anatomy of one step"): this
// rank's micro-batches, or none when it has joined; DDP sums gradients over ranks.
StepStats TrainLoop::train_step(const std::optional<std::vector<data::Batch>>& batches,
                                const dist::StepCounts& counts) {
  StepStats s;
  s.tokens = counts.global_tokens;
  const size_t mine = batches ? batches->size() : 0;
  dp_->begin_step(dp_->collective_backward() ? counts.max_micro_batches : int64_t(mine));
  model_.reset_loss();
  for (size_t m = 0; m < mine; ++m) {
    dp_->begin_micro_batch();
    Timer t;
    model_.forward(view_of((*batches)[m]));
    s.times.forward_s += t.seconds();
    t.reset();
    model_.backward(1.0f / float(counts.global_tokens));
    s.times.backward_s += t.seconds();
  }
  // Join under sharding: passes whose collectives the other ranks' micro-batches need.
  if (dp_->collective_backward())
    for (int64_t m = int64_t(mine); m < counts.max_micro_batches; ++m)
      dist::empty_pass(model_, *dp_, true);
  finish_gradients(s);
  Timer t;
  s.lr = rc_.schedule.at(state_.step);
  // A negative mean loss is as impossible as a NaN: both mean broken numbers.
  if (!std::isfinite(s.loss) || s.loss < 0 || !std::isfinite(s.grad_norm)) {
    nonfinite_.bad_step(state_.step + 1, s.loss, s.grad_norm);  // throws unless skipping
    s.skipped = true;
  } else {
    nonfinite_.good_step();
    dp_->step(s.lr, nn::clip_scale(s.grad_norm, rc_.grad_clip));
  }
  s.times.optimizer_s = t.seconds();
  return s;
}

// Completes the gradient sum over ranks and agrees on the loss, the norm (a sum of the ranks'
// shares when sharded), whether a signal asked to stop and whether rank 0 failed to write,
// so that every rank takes the same decisions. The loss and the norm come back from the
// device here, once per step.
void TrainLoop::finish_gradients(StepStats& s) {
  dp_->finish();
  s.times.comm_wait_s = dp_->last_wait_seconds();
  s.times.comm_busy_s = dp_->last_comm_seconds();
  const nn::StepScalars local =
      model_.read_step_scalars(rc_.deterministic ? Tensor{} : dp_->grads());
  std::vector<double> agreed = {local.loss_sum, stop_signal_received() ? 1.0 : 0.0,
                                write_failure().empty() ? 0.0 : 1.0,
                                dp_->grads_sharded() ? local.grad_norm_sq : 0.0};
  if (comm_.size() > 1) comm_.all_reduce(agreed);
  s.loss = agreed[0] / double(s.tokens);
  s.stop_requested = agreed[1] > 0;
  s.write_failed = agreed[2] > 0;
  s.grad_norm = std::sqrt(dp_->grads_sharded() ? agreed[3] : local.grad_norm_sq);
  if (rc_.deterministic)  // Note [Exact sum of squares]
    s.grad_norm = std::sqrt(dist::exact_sum_squares(comm_, dp_->grads(), dp_->grads_sharded()));
}

double TrainLoop::validate() {
  data::LoaderConfig vc = rc_.val_data;
  if (val_verified_) vc.verify = data::Verify::none;
  data::Loader val(vc, comm_.rank(), comm_.size());
  model_.reset_loss();
  std::vector<double> sums = {0, 0};  // loss, tokens: each rank takes its share of the batches
  for (int64_t i = 0; i < rc_.val_batches; i += comm_.size()) {
    std::optional<data::Batch> b = val.next();
    if (b)
      sums[1] += double(model_.forward(view_of(*b)));
    else if (dp_->collective_forward())
      dist::empty_pass(model_, *dp_,
                       false);  // the others' forwards gather the weights with this rank
    else
      break;
  }
  sums[0] = model_.read_step_scalars({}).loss_sum;
  if (comm_.size() > 1) comm_.all_reduce(sums);
  CHECK(sums[1] > 0, "validation split of {} yielded no tokens", vc.data_dir.string());
  return sums[0] / sums[1];
}

// A collective: every rank writes its part (Note [Sharded checkpoints]).
void TrainLoop::save() {
  if (state_.step == saved_step_) return;
  nonfinite_.check_before_save(state_.step, saved_step_);
  saved_step_ = state_.step;
  state_.loader = loader_->state();
  const SaveOptions options{.policy = {rc_.keep_last, rc_.keep_every},
                            .prune_all = options_.force,
                            .timeout_s = rc_.checkpoint_timeout_s};
  const fs::path dir = save_checkpoint(comm_, rc_.run_dir, model_, *dp_, state_, config_.to_yaml(),
                                       tokenizer_, options);
  log::info("saved {}", dir.string());
}

void TrainLoop::write_metrics(const nlohmann::json& record) {
  if (!metrics_->write(record)) metrics_failed_ = true;
}

// Note [Write failures]: a metrics or log line that cannot be written (a full disk) is not
// ignored: a checkpoint is saved at once (with several ranks, which must all take part, at the
// next step, whose all-reduce carries rank 0's failure), so that a run that is about to die
// loses nothing; a failing
// checkpoint write stops the run with an error naming the file, and `latest` still names the
// previous checkpoint.
std::string TrainLoop::write_failure() const {
  if (!leader_ || write_failure_reported_) return {};
  if (metrics_failed_) return fmt::format("{} ({})", metrics_->path().string(), metrics_->why());
  if (const std::string e = log::file_error(); !e.empty())
    return fmt::format("{} ({})", (rc_.run_dir / "train.log").string(), e);
  return {};
}

void TrainLoop::report_write_failure() {
  if (write_failure_reported_) return;
  if (leader_) {
    if (progress_) progress_->finish();
    log::warn("cannot write {}: saving a checkpoint at step {} now", write_failure(), state_.step);
  }
  write_failure_reported_ = true;
  save();
}

void TrainLoop::log_step(const StepStats& s, double step_s) {
  const int64_t total = rc_.steps;
  const bool line = state_.step % rc_.log_every == 0 || state_.step == total;
  // Every rank takes part in the straggler report at every step (it is a collective): a
  // straggler is a rank behind on several steps in a row (Note [Stragglers]).
  std::optional<dist::StragglerReport> ranks;
  if (comm_.size() > 1) ranks = dist::gather_step_times(comm_, s.times);
  if (!leader_) return;
  if (ranks)
    if (const auto warning = stragglers_.observe(*ranks))
      log::warn("step {}: {}", state_.step, *warning);
  const double tok_s = double(s.tokens) / step_s;
  const double flops = rc_.model.flops_per_token(s.seq_len) * tok_s;
  const double mfu = flops / (peak_.gflops * 1e9 * comm_.size());
  const double eta =
      run_timer_.seconds() / double(state_.step - first_step_) * double(total - state_.step);
  progress_->update(state_.step, s.loss, tok_s, mfu, eta, line);
  if (!line) return;
  const dist::StepTimes& t = s.times;
  nlohmann::json j = {{"step", state_.step},
                      {"loss", s.loss},
                      {"lr", s.lr},
                      {"grad_norm", s.grad_norm},
                      {"tokens", state_.tokens_seen},
                      {"skipped", s.skipped},
                      {"tokens_per_s", tok_s},
                      {"mfu", mfu},
                      {"step_ms", step_s * 1e3},
                      {"data_ms", t.data_wait_s * 1e3},
                      {"forward_ms", t.forward_s * 1e3},
                      {"backward_ms", t.backward_s * 1e3},
                      {"comm_wait_ms", t.comm_wait_s * 1e3},
                      {"comm_busy_ms", t.comm_busy_s * 1e3},
                      {"comm_hidden", t.hidden_fraction()},
                      {"optimizer_ms", t.optimizer_s * 1e3},
                      {"rss_mib", resident_mib()}};
  if (ranks) {
    j["slowest_rank"] = ranks->slowest_rank;
    j["slowest_lag"] = ranks->lag;
  }
  // Calls that ran a slower kernel than planned (a GPU's cuDNN or cuBLASLt declining), so far.
  for (const fallback::Count& f : fallback::counts()) j["fallbacks"][f.path] = f.calls;
  if (comm_.size() > 1) {  // the collectives' bus bandwidth since the last line
    const dist::CommStats now = comm_.stats();
    j["comm_busbw_gbps"] = now.bus_gbps_since(comm_logged_);
    comm_logged_ = now;
  }
  write_metrics(j);
}

// Saves a checkpoint and says why the run stops here; returns the exit code.
// Note [Stop marker]: a launcher may not pass the ranks' exit code on (mpirun that got the
// SIGINT itself exits 1 although every rank exited 75), so rank 0 also records the stop in
// run_dir/stopped once its checkpoint is saved; the launch scripts remove it before they
// start the job and report 75 when the job failed with it present. Written last, after the
// checkpoint: it never claims a stop whose checkpoint is not there.
void TrainLoop::mark_stopped() {
  if (!leader_) return;
  try {
    const nlohmann::json marker = {{"step", state_.step},
                                   {"signal", signal_name(stop_signal_received())},
                                   {"exit_code", kExitStopped},
                                   {"checkpoint", latest_checkpoint(rc_.run_dir).string()}};
    write_file_atomic(rc_.run_dir / kStoppedMarker, marker.dump() + "\n");
  } catch (const std::exception& e) {  // the checkpoint is saved: the run still exits 75
    log::warn("cannot write the stop marker {}: {}", (rc_.run_dir / kStoppedMarker).string(),
              e.what());
  }
}

int TrainLoop::stop_early(const std::string& why, int exit_code) {
  if (progress_) progress_->finish();
  log::info("{}: saving a checkpoint at step {} and stopping", why, state_.step);
  save();
  return exit_code;
}

// Says what runs: model size, precision and its CPU path, checkpointing, memory against the
// plan, the MFU reference.
void TrainLoop::log_setup() {
  const nn::Transformer::Memory mem = transformer_.memory();
  std::string bf16_path;
  detect_cpu_bf16_math(&bf16_path);
  const nn::ExecConfig& e = rc_.exec;
  log::info(
      "model: {} parameters; precision {}{}; gradients {}; activation checkpointing {}{}",
      model_.layout().total(), float_dtype_name(e.compute),
      e.compute == DType::bf16 ? " (" + bf16_path + ")" : "", float_dtype_name(e.grad),
      nn::recompute_name(e.recompute),
      e.recompute_layers.empty() ? "" : fmt::format(" on {} blocks", e.recompute_layers.size()));
  const dist::StateBytes st = dp_->state_bytes();
  log::info(
      "memory plan per rank: {:.1f} MiB (sharding {}: fp32 masters {:.1f}, working weights "
      "{:.1f}, gradients {:.1f}, optimizer {:.1f}, buffers {:.1f}; activations {:.1f}, workspace "
      "{:.1f}); {} rank(s)",
      planned_mib(), dist::sharding_stage_name(dp_->stage()), st.masters / kMiB, st.working / kMiB,
      st.grads / kMiB, st.optimizer / kMiB, st.buffers / kMiB, mem.activations / kMiB,
      mem.workspace / kMiB, comm_.size());
  log::info("MFU against {}", peak_.source);
}

// The model's state as this rank holds it, and the model's own activations and scratch.
double TrainLoop::planned_mib() const {
  const nn::Transformer::Memory m = transformer_.memory();
  return double(dp_->state_bytes().total() + m.activations + m.workspace + m.inputs) / kMiB;
}

int TrainLoop::run() {
  start_up();
  const int64_t total = rc_.steps;
  log_setup();
  progress_ = std::make_unique<Progress>(leader_ ? rc_.progress : "off", total);
  take_stop_signals();  // Note [Stop signals]
  run_timer_.reset();
  while (state_.step < total) {
    test_fault(comm_.rank(), state_.step);
    Timer step_timer;
    const int micro = int(micro_batches(state_.step));
    auto batches = next_step_batches(micro);
    const double data_s = step_timer.seconds();
    int64_t my_tokens = 0;
    if (batches)
      for (const data::Batch& b : *batches) my_tokens += b.loss_tokens;
    const dist::StepCounts counts = dist::exchange_counts(comm_, batches.has_value(), my_tokens,
                                                          batches ? int64_t(batches->size()) : 0);
    if (join_.decide(counts, batches.has_value(), state_.step) == dist::StepAction::stop)
      return stop_early(fmt::format("data.epochs = {} reached", rc_.train_data.max_epochs), 0);
    CHECK(counts.global_tokens > 0, "step {}: the global batch has no loss tokens",
          state_.step + 1);
    StepStats s = train_step(batches, counts);
    s.times.data_wait_s = data_s;
    log::debug(
        "step {}: {} micro-batch(es), {} loss tokens here; data {:.1f} ms, forward {:.1f} ms, "
        "backward {:.1f} ms, exposed communication {:.1f} ms, optimizer {:.1f} ms",
        state_.step + 1, batches ? batches->size() : 0, my_tokens, data_s * 1e3,
        s.times.forward_s * 1e3, s.times.backward_s * 1e3, s.times.comm_wait_s * 1e3,
        s.times.optimizer_s * 1e3);
    s.seq_len = int(rc_.seq_len_schedule.at(state_.step, rc_.train_data.seq_len));
    ++state_.step;
    state_.tokens_seen += s.tokens;
    log_step(s, step_timer.seconds());
    // One process need not wait for the next step's agreement (Note [Write failures]).
    if (s.write_failed || (comm_.size() == 1 && !write_failure().empty())) report_write_failure();
    if (s.stop_requested && state_.step < total) {
      const int code = stop_early("stop signal received", kExitStopped);
      mark_stopped();
      // No rank exits before the marker is there: a launcher that kills the job when one
      // rank ends (srun --kill-on-bad-exit) must not end rank 0 before it is written.
      if (comm_.size() > 1) comm_.barrier();
      return code;
    }
    if (rc_.val_every > 0 && (state_.step % rc_.val_every == 0 || state_.step == total)) {
      double v = validate();
      if (leader_) {
        progress_->finish();
        log::info("step {}: val loss {:.4f} (perplexity {:.2f})", state_.step, v, std::exp(v));
        write_metrics({{"step", state_.step}, {"val_loss", v}, {"val_perplexity", std::exp(v)}});
      }
    }
    if (rc_.checkpoint_every > 0 && state_.step % rc_.checkpoint_every == 0 &&
        state_.step < total) {
      if (progress_) progress_->finish();
      // Not during a streak of skipped steps, which may be a divergence: its checkpoints would
      // rotate the last good one out (Note [Non-finite values]).
      if (nonfinite_.skipping() && leader_)
        log::warn("step {}: no checkpoint while steps are being skipped", state_.step);
      if (!nonfinite_.skipping()) save();
    }
  }
  progress_->finish();
  save();
  log::info(
      "done: {} steps, {} tokens in {:.1f} s; peak resident memory {:.1f} MiB (the plan: "
      "{:.1f} MiB for the model, gradients, optimizer and activations)",
      state_.step, state_.tokens_seen, run_timer_.seconds(), peak_resident_mib(), planned_mib());
  return 0;
}

// Relative data paths are made absolute, so that the run's saved config (and eval, sample or
// export of its checkpoints) works from any working directory.
Config with_absolute_paths(Config c) {
  for (const char* key : {"data.path", "data.tokenizer", "train.init_from"}) {
    const fs::path p = c.text(key);
    if (!p.empty() && p.is_relative()) c.set(key, fs::absolute(p).lexically_normal().string());
  }
  return c;
}

}  // namespace

int run_training(const Config& config, const TrainOptions& options) {
  check_training_paths(config);
  block_stop_signals();  // Note [Stop signals]
#pragma omp parallel
  {
    // OpenMP's threads start here, blocking the stop signals.
  }
  const dist::LaunchInfo launch = dist::discover_launch();
  log::configure(launch.rank, launch.world_size, log::parse_level(config.text("log.level")),
                 config.boolean("log.all_ranks"));
  dist::CommOptions comm_options{.timeout_s = config.real("dist.timeout_s")};
  auto comm = dist::make_communicator(launch, comm_options);
  // A CUDA run takes GPU local rank, queues its work on a stream of its own, and talks to
  // other GPUs over NCCL (its id sent over MPI, host buffers still through MPI), whose
  // collectives follow that stream.
  GpuChoice gpu;
  std::unique_ptr<CudaStream> stream;
  std::unique_ptr<dist::Communicator> nccl;
  if (config.text("run.device") == "cuda") {
    gpu.device = dist::bind_device(launch);
    if (gpu.device < 0)
      throw UsageError(
          cuda_built() ? fmt::format("run.device = cuda but rank {} sees no CUDA GPU", launch.rank)
                       : std::string("run.device = cuda but this trainer was built "
                                     "without the CUDA backend (TRAINER_CUDA=ON)"));
    stream = std::make_unique<CudaStream>();
    gpu.stream = comm_options.cuda_stream = stream->get();
    if (comm->size() > 1 || config.text("dist.backend") == "nccl")
      nccl = dist::make_nccl_communicator(*comm, gpu.device, comm_options);
  }
  const Config absolute = with_absolute_paths(config);
  RunConfig rc = resolve_on_device(absolute, gpu);
  // GPUs are one per rank; CPU ranks on a node share its memory.
  check_memory(*comm, plan_memory(rc, comm->size()), rc.exec.device,
               rc.exec.device == Device::cuda ? 1 : launch.local_size,
               config.text("train.memory_check") == "warn");
  const PeakReference peak = peak_reference(rc);
  TrainLoop loop(absolute, std::move(rc), options, nccl ? *nccl : *comm, peak);
  return loop.run();
}

}  // namespace trainer::app
