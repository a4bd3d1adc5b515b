// The loop itself: construction, each step's micro-batches, gradients and update, validation,
// saves, and the run from start to its end or stop.
#include "app/train_loop.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>

#include "app/stop_signals.h"
#include "dist/data_parallel.h"
#include "dist/exact_norm.h"
#include "dist/join.h"
#include "nn/adamw.h"
#include "runtime/error.h"
#include "runtime/log.h"

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

// One row of n tokens that counts nothing: an empty pass's batch (Join).
struct EmptyBatch {
  explicit EmptyBatch(int n) : tokens(size_t(n), 0), targets(size_t(n), -1) {}
  nn::BatchView view() const {
    return {1, int(tokens.size()), tokens.data(), targets.data(), nullptr, nullptr};
  }
  std::vector<int32_t> tokens, targets;
};

nn::BatchView view_of(const data::Batch& b) {
  return {b.B,
          b.T,
          b.tokens.data(),
          b.targets.data(),
          b.segments.empty() ? nullptr : b.segments.data(),
          b.lengths.empty() ? nullptr : b.lengths.data()};
}

// Ranges of the flat parameter buffer matched by the freeze patterns.
std::vector<dist::Range> frozen_ranges(const nn::ParamLayout& layout,
                                       const std::vector<std::string>& patterns) {
  std::vector<dist::Range> out;
  for (const nn::ParamInfo& p : layout.params())
    if (matches_any(p.name, patterns)) out.push_back({p.offset, p.offset + p.numel});
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
      dp_(dist::make_data_parallel(
          data_, model_,
          {.stage = rc_.sharding,
           .bucket_mb = rc_.bucket_mb,
           .reshard_after_forward = rc_.reshard_after_forward,
           .adamw = rc_.adamw,
           .deterministic = rc_.deterministic,
           .reduce_in_finish = grid.pipeline_size() > 1,
           .frozen = frozen_ranges(model_.layout(), rc_.freeze),
           .is_frozen =
               [this](const std::string& name) { return matches_any(name, rc_.freeze); }})),
      join_(rc_.join),
      peak_(peak),
      token_flops_(rc_.model.token_flops()),
      stragglers_(comm_.hosts()),
      nonfinite_(comm_, model_, *dp_,
                 {rc_.on_nonfinite, rc_.max_consecutive_skips, rc_.max_skips}) {
  if (grid_.tensor_size() > 1) transformer_.attach_tensor_group(&tensor_group_);
  if (grid_.tensor_size() > 1 || grid_.pipeline_size() > 1) {
    norm_share_ = std::make_unique<dist::GradNormShare>(model_, *dp_, grid_.tensor_rank(),
                                                        model_.layout().holds_tied_copy());
  }
  if (grid_.pipeline_size() > 1) {
    pipeline_ = std::make_unique<dist::Pipeline>(grid_.pipeline(), model_, rc_.pipeline_schedule,
                                                 rc_.pipeline_chunks, rc_.exec.activation_slots);
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
// step"): this rank's micro-batches, or none when it has joined; DDP sums gradients over ranks.
StepStats TrainLoop::train_step(const std::optional<std::vector<data::Batch>>& batches,
                                const dist::StepCounts& counts) {
  StepStats s;
  s.tokens = counts.global_tokens;
  const size_t mine = batches ? batches->size() : 0;
  if (pipeline_) {
    pipeline_passes(batches, counts, s);
    finish_gradients(s);
    return update(s);
  }
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
  return update(s);
}

// Pipeline parallelism: every replica runs the same number of micro-batches through its
// stages (the most any data rank has, interleaved rounded up to a multiple of the stages), the
// missing ones empty (Join: a micro-batch of one token that counts nothing adds exactly zero),
// so every data group's collectives match by construction.
void TrainLoop::pipeline_passes(const std::optional<std::vector<data::Batch>>& batches,
                                const dist::StepCounts& counts, StepStats& s) {
  const int64_t M = pipeline_micro_batches(rc_, counts.max_micro_batches);
  const EmptyBatch empty(model_.tokens_multiple());
  std::vector<nn::BatchView> views;
  for (int64_t m = 0; m < M; ++m)
    views.push_back(batches && m < int64_t(batches->size()) ? view_of((*batches)[size_t(m)])
                                                            : empty.view());
  dp_->begin_step(M);
  model_.reset_loss();
  const dist::Pipeline::Times t = pipeline_->train(views, 1.0f / float(counts.global_tokens),
                                                   [this] { dp_->begin_micro_batch(); });
  s.times.forward_s = t.compute_s;  // forward and backward passes interleave
  s.bubble = t.idle_s;              // summed over the world in finish_gradients, then a share
}

// With the gradients summed and the loss and norm agreed: the update, unless they are not
// finite (Note [Non-finite values]).
StepStats TrainLoop::update(StepStats& s) {
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
  if (pipeline_) sum_tied_embedding();
  s.times.comm_wait_s = dp_->last_wait_seconds();
  s.times.comm_busy_s = dp_->last_comm_seconds();
  // A tensor group's ranks each hold a share of the loss (its vocabulary slice's targets) and
  // of the norm (GradNormShare), which the world's sum adds up (once per data replica).
  nn::StepScalars local =
      model_.read_step_scalars(rc_.deterministic || norm_share_ ? Tensor{} : dp_->grads());
  if (norm_share_) local.grad_norm_sq = norm_share_->sum_squares(model_.context(), dp_->grads());
  const bool summed = dp_->grads_sharded() || norm_share_;
  const bool counted = dp_->grads_sharded() || data_.rank() == 0;  // one replica's, unsharded
  std::vector<double> agreed = {local.loss_sum, stop_signal_received() ? 1.0 : 0.0,
                                write_failure().empty() ? 0.0 : 1.0,
                                summed && counted ? local.grad_norm_sq : 0.0};
  if (pipeline_) agreed.insert(agreed.end(), {s.bubble, s.bubble + s.times.forward_s});
  if (comm_.size() > 1) comm_.all_reduce(agreed);
  if (pipeline_)  // every stage's idle share of its step, pooled
    s.bubble = agreed[5] > 0 ? agreed[4] / agreed[5] : 0;
  s.loss = agreed[0] / double(s.tokens);
  s.stop_requested = agreed[1] > 0;
  s.write_failed = agreed[2] > 0;
  s.grad_norm = std::sqrt(summed ? agreed[3] : local.grad_norm_sq);
  if (rc_.deterministic)  // Note [Exact sum of squares]
    s.grad_norm = std::sqrt(dist::exact_sum_squares(comm_, dp_->grads(), dp_->grads_sharded()));
}

// The first and last stages' copies of a tied embedding get the sum of their gradients (the
// token embedding's and the head's), so both take the same update and stay equal.
void TrainLoop::sum_tied_embedding() {
  const nn::ParamLayout& layout = model_.layout();
  const int E = layout.embedding_unit();
  if (!rc_.model.tie_embeddings || E < 0) return;
  const nn::Unit& u = layout.units()[size_t(E)];  // first, alike in both stages' layouts
  const Tensor grads = dp_->grads();
  for (const nn::FlatSlice& sl : dp_->slices()) {
    const int64_t b = std::max(sl.begin, u.begin), e = std::min(sl.end, u.end);
    if (b >= e) continue;
    const Tensor g = grads.flat(sl.local + (b - sl.begin), e - b);
    grid_.ends().all_reduce_async(g.data, g.numel(), g.dtype).wait();
  }
}

int64_t TrainLoop::forward_only(const nn::BatchView& batch) {
  if (!pipeline_) return model_.forward(batch);
  const int64_t counted = pipeline_->forward(batch);
  return rc_.model.pipeline.last ? counted : 0;  // the loss's stage counts its tokens
}

double TrainLoop::validate() {
  data::LoaderConfig vc = rc_.val_data;
  if (val_verified_) vc.verify = data::Verify::none;
  data::Loader val(vc, data_.rank(), data_.size());
  model_.reset_loss();
  // Loss, tokens: each data rank takes its share of the batches; a tensor group's ranks each
  // hold a share of the loss and count the tokens once.
  std::vector<double> sums = {0, 0};
  for (int64_t i = 0; i < rc_.val_batches; i += data_.size()) {
    std::optional<data::Batch> b = val.next();
    const double counted_here = grid_.tensor_rank() == 0 ? 1.0 : 0.0;
    if (b)
      sums[1] += counted_here * double(forward_only(view_of(*b)));
    else if (pipeline_)  // the stages' passes
      forward_only(EmptyBatch(model_.tokens_multiple()).view());
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

// A collective over the data group: each rank scores its share of the examples.
void TrainLoop::score_tasks() {
  std::function<void()> idle;
  if (dp_->collective_forward()) idle = [this] { dist::empty_pass(model_, *dp_, false); };
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
    const dist::StepCounts counts = dist::exchange_counts(data_, batches.has_value(), my_tokens,
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

}  // namespace trainer::app
