// The loop itself: construction, each step's micro-batches, gradients and update, validation,
// saves, and the run from start to its end or stop.
#include "app/train_loop.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>

#include "app/memory_plan.h"
#include "app/stop_signals.h"
#include "dist/data_parallel.h"
#include "dist/join.h"
#include "nn/adamw.h"
#include "nn/dropout.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/trace.h"

#include <nlohmann/json.hpp>

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

// A test's way to make one rank fail with an error of its own at a step
// (TRAINER_TEST_FAULT=<rank>:<step>), standing in for a fault only that rank sees (its disk,
// its device): the job must end, and rank 0's train.log with that rank's error.
void test_fault(int rank, int64_t step) {
  static const char* env = std::getenv("TRAINER_TEST_FAULT");
  if (env && fmt::format("{}:{}", rank, step) == env)
    THROW_ERROR("TRAINER_TEST_FAULT: rank {} fails at step {}", rank, step);
}

// A test's poisoned batch (TRAINER_TEST_POISON=<step>, 1-based): the first data-parallel
// rank's micro-batches of that step get other tokens, drawn uniformly from the vocabulary by a
// hash of their place, standing in for a corrupt stretch of a corpus that one rank reads.
void test_poison(std::vector<data::Batch>& batches, int data_rank, int64_t step, int vocab) {
  static const char* env = std::getenv("TRAINER_TEST_POISON");
  if (!env || data_rank != 0 || std::to_string(step) != env) return;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (data::Batch& b : batches)
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      x = (x ^ i) * 0xBF58476D1CE4E5B9ull;
      b.tokens[i] = int32_t((x >> 33) % uint64_t(vocab));
      if (b.targets[i] >= 0) b.targets[i] = int32_t((x >> 13) % uint64_t(vocab));
    }
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

// The ranges of the flat parameter buffer that are kept fixed.
std::vector<dist::Range> frozen_ranges(const nn::ParamLayout& layout, const RunConfig& rc) {
  std::vector<dist::Range> out;
  for (const nn::ParamInfo& p : layout.params())
    if (is_frozen(p, rc)) out.push_back({p.offset, p.offset + p.numel});
  return out;
}

}  // namespace

TrainLoop::TrainLoop(const Config& config, RunConfig rc, const TrainOptions& options,
                     dist::Grid& grid, const PeakReference& peak)
    : config_(config),
      rc_(std::move(rc)),
      options_(options),
      grid_(grid),
      comm_(grid.world()),
      data_(grid.data()),
      leader_(comm_.rank() == 0),
      transformer_(rc_.model, rc_.exec),
      tensor_group_(grid.tensor()),
      model_(transformer_),
      dp_(dist::make_data_parallel(data_, model_,
                                   {.sharding = rc_.sharding,
                                    .bucket_mb = rc_.bucket_mb,
                                    .reshard_after_forward = rc_.reshard_after_forward,
                                    .adamw = rc_.adamw,
                                    .deterministic = rc_.deterministic,
                                    .reduce_in_finish = grid.pipeline_size() > 1,
                                    .frozen = frozen_ranges(model_.layout(), rc_),
                                    .is_frozen = frozen_by_name(model_.layout(), rc_)})),
      join_(rc_.join),
      peak_(peak),
      token_flops_(rc_.model.token_flops()),
      stragglers_(comm_.hosts()),
      nonfinite_(comm_, model_, *dp_, {rc_.on_nonfinite, rc_.max_consecutive_skips, rc_.max_skips}),
      spikes_(rc_.spike_guard) {
  Buffer::reset_peaks(rc_.exec.device);  // the report's peaks are training's (Note [Memory report])
  if (keeps_save_snapshot(rc_, data_.size(), comm_.rank()))
    snapshot_ = std::make_unique<SaveSnapshot>(dp_->masters().numel());
  if (grid_.tensor_size() > 1) transformer_.attach_tensor_group(&tensor_group_);
  step_ = std::make_unique<dist::TrainStep>(
      grid_, model_, *dp_,
      dist::TrainStepConfig{.schedule = rc_.pipeline_schedule,
                            .chunks = rc_.pipeline_chunks,
                            .activation_slots = rc_.exec.activation_slots,
                            .exact_norm = rc_.deterministic});
  if (grid_.pipeline_size() > 1) {
    const int64_t M = micro_batches(0), P = grid_.pipeline_size();
    if (M < P && leader_)  // (interleaved pads to P micro-batches, with empty ones: no better)
      log::warn(
          "{} micro-batch(es) per step on {} pipeline stages: each stage idles {:.0f}% of the "
          "step (the bubble, (P - 1) / (M + P - 1)); raise train.grad_accum or "
          "train.global_batch to at least {} micro-batches",
          M, P, 100 * dist::bubble_fraction(rc_.pipeline_schedule, int(P), int(M), 1), P);
  }
  check_batch_over_ranks();
}

// This rank's micro-batches at `step`: train.grad_accum (or its schedule), or its share of
// train.global_batch (or its schedule).
int64_t TrainLoop::micro_batches(int64_t step) const {
  if (rc_.global_batch == 0) return rc_.grad_accum_schedule.at(step, rc_.grad_accum);
  return rc_.grad_accum_schedule.at(step, rc_.global_batch) / data_.size();
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

// One optimizer step on the global batch (docs/architecture.md, "Data flow of one training
// step"): this rank's micro-batches (none when it has joined) through the step at this layout,
// then the update.
StepStats TrainLoop::train_step(const std::optional<std::vector<data::Batch>>& batches,
                                const dist::StepCounts& counts) {
  std::vector<nn::BatchView> views;
  if (batches)
    for (const data::Batch& b : *batches) {
      // Micro-batch i of this rank is the global batch's i W + rank (as the loader deals them).
      const int64_t micro = int64_t(views.size()) * data_.size() + data_.rank();
      views.push_back(view_of(b));
      views.back().dropout_key = nn::dropout_batch_key(rc_.seed, state_.step, micro);
    }
  const dist::StepResult r = step_->run(views, counts, [this] {
    return dist::StepFlags{stop_signal_received() != 0, !write_failure().empty(),
                           pending_save_ && pending_save_->writing()};
  });
  StepStats s;
  s.tokens = counts.global_tokens;
  s.loss = r.loss_sum / double(s.tokens);
  s.grad_norm = r.grad_norm;
  s.bubble = r.bubble;
  s.stop_requested = r.stop_requested;
  s.write_failed = r.write_failed;
  s.save_writing = r.save_writing;
  s.times = r.times;
  return update(s);
}

// Whether a schedule changes the batch or the data at `step` (0-based): the spike guard starts
// its windows afresh there (Note [Spike guard]).
bool TrainLoop::phase_starts(int64_t step) const {
  bool changes = false;
  for (const StepSchedule* s : {&rc_.grad_accum_schedule, &rc_.seq_len_schedule})
    for (const auto& [from, value] : s->entries) changes |= from == step;
  for (const data::WeightPhase& p : rc_.train_data.mixture.phases) changes |= p.step == step;
  return changes;
}

// With the gradients summed and the loss and norm agreed: the update, unless they are not
// finite (Note [Non-finite values]) or spike (Note [Spike guard]; under stop, run() ends).
StepStats TrainLoop::update(StepStats& s) {
  const trace::Span span("update", "phase");
  Timer t;
  s.lr = rc_.schedule.at(state_.step);
  if (phase_starts(state_.step)) spikes_.restart();
  // A negative mean loss is as impossible as a NaN: both mean broken numbers.
  const bool broken = !std::isfinite(s.loss) || s.loss < 0 || !std::isfinite(s.grad_norm);
  if (!broken) s.spike = spikes_.spike(s.loss, s.grad_norm);
  // Every rank judges alike (the loss and norm are agreed): a save in flight holds the state
  // before this step, and is committed before the step can end the run.
  if (broken || !s.spike.empty()) finish_save();
  if (broken) {
    nonfinite_.bad_step(state_.step + 1, s.loss, s.grad_norm);  // throws unless skipping
    s.skipped = true;
  } else if (!s.spike.empty()) {
    s.skipped = true;
    if (rc_.spike_guard.action == SpikeAction::skip) nonfinite_.skipped(state_.step + 1, s.spike);
  } else {
    nonfinite_.good_step();
    spikes_.accept(s.loss, s.grad_norm);
    dp_->step(s.lr, nn::clip_scale(s.grad_norm, rc_.grad_clip));
  }
  s.times.optimizer_s = t.seconds();
  return s;
}

// The mean loss of `set`: its first train.val_batches batches, or all of it (0), the same ones
// every time.
double TrainLoop::validate(const ValSet& set) {
  data::LoaderConfig vc = set.data;
  if (val_verified_) vc.verify = data::Verify::none;
  data::Loader val(vc, data_.rank(), data_.size());
  model_.reset_loss();
  // Loss, tokens: each data rank takes its share of the batches; a tensor group's ranks each
  // hold a share of the loss and count the tokens once.
  std::vector<double> sums = {0, 0};
  const bool whole = rc_.val_batches == 0;
  for (int64_t i = 0; whole || i < rc_.val_batches; i += data_.size()) {
    std::optional<data::Batch> b = val.next();
    if (whole) {  // every rank goes on while any has a batch left
      std::vector<double> left = {b ? 1.0 : 0.0};
      if (comm_.size() > 1) comm_.all_reduce(left);
      if (left[0] == 0) break;
    }
    const double counted_here = grid_.tensor_rank() == 0 ? 1.0 : 0.0;
    if (b)
      sums[1] += counted_here * double(step_->forward(view_of(*b)));
    else if (!step_->idle_forward() && !whole)  // the others' passes need none of this rank
      break;
  }
  sums[0] = model_.read_step_scalars({}).loss_sum;
  if (comm_.size() > 1) comm_.all_reduce(sums);
  CHECK(sums[1] > 0, "the {} split of {} yielded no tokens", vc.split, vc.data_dir.string());
  return sums[0] / sums[1];
}

// Every validation set's loss, logged and written as one metrics record (docs/recipes.md,
// "Validation sets"): val_loss is the first set's, and each named set also has its own.
void TrainLoop::validate_all() {
  nlohmann::json record = {{"step", state_.step}};
  if (leader_) progress_->finish();
  for (const ValSet& set : rc_.val_sets) {
    const double v = validate(set);
    if (!record.contains("val_loss")) {
      record["val_loss"] = v;
      record["val_perplexity"] = std::exp(v);
    }
    if (!set.name.empty()) {
      record["val_loss_" + set.name] = v;
      record["val_perplexity_" + set.name] = std::exp(v);
    }
    if (leader_)
      log::info("step {}: val loss{} {:.4f} (perplexity {:.2f})", state_.step,
                set.name.empty() ? "" : " " + set.name, v, std::exp(v));
  }
  if (leader_) write_metrics(record);
}

// A collective over the data group: each rank scores its share of the examples.
void TrainLoop::score_tasks() {
  std::function<void()> idle;
  if (dp_->collective_forward()) idle = [this] { step_->idle_forward(); };
  const TaskSplit split{data_.rank(), data_.size(), &data_, idle};
  nlohmann::json record = {{"step", state_.step}};
  for (const Task& task : tasks_) {
    const TaskScore s = score_task(transformer_, task, transformer_.exec().max_rows, split);
    record["task_" + task.name] = s.accuracy();
    if (task.multiple_choice) record["task_" + task.name + "_norm"] = s.accuracy_norm();
    if (leader_)
      log::info("step {}: task {} accuracy {:.4f}{} ({} examples)", state_.step, task.name,
                s.accuracy(),
                task.multiple_choice ? fmt::format(", normalised {:.4f}", s.accuracy_norm()) : "",
                s.examples);
  }
  if (leader_) write_metrics(record);
}

// A collective: every rank writes its part (Note [Sharded checkpoints]), with the data
// position `loader` (default: the loader's now), after the save in flight is committed.
// `in_background` under checkpoint.async: this rank's write runs on while training goes on
// (Note [Asynchronous checkpoints]).
void TrainLoop::save(const std::optional<data::LoaderState>& loader, bool in_background) {
  finish_save();
  if (state_.step == saved_step_) return;
  nonfinite_.check_before_save(state_.step, saved_step_);
  saved_step_ = state_.step;
  state_.loader = loader ? *loader : loader_->state();
  state_.spike_guard = spikes_.state();
  const SaveOptions options{.policy = {rc_.keep_last, rc_.keep_every},
                            .prune_all = options_.force,
                            .timeout_s = rc_.checkpoint_timeout_s};
  in_background &= rc_.checkpoint_async;
  Timer timer;
  auto save =
      std::make_unique<CheckpointSave>(comm_, rc_.run_dir, model_, *dp_, state_, config_.to_yaml(),
                                       tokenizer_, options, snapshot_.get(), in_background);
  if (in_background) {
    log::info("step {}: copied the state in {:.3f} s; writing step-{} in the background",
              state_.step, save->begin_s(), state_.step);
    pending_save_ = std::move(save);
    return;
  }
  const fs::path dir = save->commit();
  log::info("saved {} in {:.3f} s", dir.string(), timer.seconds());
}

// A collective: commits the save whose write is in flight, if any, waiting for it (the ranks
// call it together: at a step boundary where the step's agreement says no write is running,
// or before a save, a stop or the end).
void TrainLoop::finish_save() {
  if (!pending_save_) return;
  const std::unique_ptr<CheckpointSave> save = std::move(pending_save_);
  const fs::path dir = save->commit();
  log::info("saved {} (written in the background in {:.3f} s; committed at step {})", dir.string(),
            save->write_s(), state_.step);
}

// train.spike_guard.action=stop (Note [Spike guard]): saves the state before the step, which
// never updated the weights, with the data position before its batches, and ends the run.
void TrainLoop::stop_at_spike(const StepStats& s, const data::LoaderState& before) {
  if (progress_) progress_->finish();
  if (leader_)
    write_metrics({{"step", state_.step + 1},
                   {"loss", s.loss},
                   {"grad_norm", s.grad_norm},
                   {"spike", s.spike},
                   {"stopped", true}});
  save(before);
  THROW_ERROR(
      "step {}: {}; train.spike_guard.action = stop: the run ends with checkpoint step-{}, the "
      "state before this step (resuming replays the batch: resume with "
      "train.spike_guard.action=skip to pass over it, or with a lower optimizer.lr)",
      state_.step + 1, s.spike, state_.step);
}

int TrainLoop::run() {
  start_up();
  const int64_t total = rc_.steps;
  log_setup();
  progress_ = std::make_unique<Progress>(leader_ ? rc_.progress : ProgressMode::off, total);
  take_stop_signals();  // Note [Stop signals]
  // A resumed run records from its first step inside log.trace_steps.
  const int64_t trace_from = std::max(rc_.trace_first, state_.step + 1);
  const bool traces = rc_.trace_first > 0 && trace_from <= rc_.trace_last;
  if (traces) prepare_traces();
  run_timer_.reset();
  while (state_.step < total) {
    test_fault(comm_.rank(), state_.step);
    if (traces && state_.step + 1 == trace_from) begin_trace();  // before the step's time
    // The step's time, from one clock read to another, is also its span in a trace.
    const int64_t step_begin = trace::now_ns();
    if (trace::on()) trace::begin("step", "step", "step", state_.step + 1, step_begin);
    const int micro = int(micro_batches(state_.step));
    const data::LoaderState before = loader_->state();
    std::optional<std::vector<data::Batch>> batches;
    {
      const trace::Span span("data", "phase");
      batches = next_step_batches(micro);
      if (batches) test_poison(*batches, data_.rank(), state_.step + 1, rc_.model.vocab_size);
    }
    const double data_s = double(trace::now_ns() - step_begin) / 1e9;
    int64_t my_tokens = 0;
    if (batches)
      for (const data::Batch& b : *batches) my_tokens += b.loss_tokens;
    dist::StepCounts counts;
    {
      const trace::Span span("batch agreement", "phase");
      counts = dist::exchange_counts(data_, batches.has_value(), my_tokens,
                                     batches ? int64_t(batches->size()) : 0);
    }
    dist::StepAction action{};
    try {
      action = join_.decide(counts, batches.has_value(), state_.step);
    } catch (const Error&) {  // dist.join: throw, decided alike on every rank from the counts
      finish_save();
      throw;
    }
    if (action == dist::StepAction::stop)
      return stop_early(rc_.source_names.empty()
                            ? fmt::format("data.epochs = {} reached", rc_.train_data.max_epochs)
                            : std::string("every source of data.sources has given its epochs"),
                        0);
    CHECK(counts.global_tokens > 0, "step {}: the global batch has no loss tokens",
          state_.step + 1);
    StepStats s = train_step(batches, counts);
    if (!s.spike.empty() && rc_.spike_guard.action == SpikeAction::stop) stop_at_spike(s, before);
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
    const int64_t step_end = trace::now_ns();
    if (trace::on()) trace::end(step_end);
    log_step(s, double(step_end - step_begin) / 1e9);
    if (pending_save_ && !s.save_writing) finish_save();
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
    if (rc_.val_every > 0 && (state_.step % rc_.val_every == 0 || state_.step == total))
      validate_all();
    if (!tasks_.empty() && (state_.step == total || (rc_.eval_tasks_every > 0 &&
                                                     state_.step % rc_.eval_tasks_every == 0))) {
      if (leader_) progress_->finish();
      score_tasks();
    }
    if (rc_.checkpoint_every > 0 && state_.step % rc_.checkpoint_every == 0 &&
        state_.step < total) {
      if (progress_) progress_->finish();
      // Not during a streak of skipped steps, which may be a divergence: its checkpoints would
      // rotate the last good one out (Note [Non-finite values]).
      if (nonfinite_.skipping() && leader_)
        log::warn("step {}: no checkpoint while steps are being skipped", state_.step);
      if (!nonfinite_.skipping()) save(std::nullopt, true);
    }
    if (traces && state_.step == rc_.trace_last) write_trace();
  }
  progress_->finish();
  save();
  log::info("{}", memory_report(memory_plan(), rc_.exec.device, loader_->peak_queued_bytes()));
  log::info(
      "done: step {}; this launch trained {} steps, {} tokens, in {:.1f} s; peak resident "
      "memory {:.1f} MiB (the plan: {:.1f} MiB for the model, gradients, optimizer and "
      "activations)",
      state_.step, state_.step - first_step_, state_.tokens_seen - first_tokens_,
      run_timer_.seconds(), peak_resident_mib(), memory_plan().total() / kMiB);
  return 0;
}

}  // namespace trainer::app
