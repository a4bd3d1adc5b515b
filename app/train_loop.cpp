#include "app/train_loop.h"

#include <csignal>
#include <cmath>
#include <memory>
#include <optional>

#include "app/checkpoint.h"
#include "app/metrics.h"
#include "app/run_setup.h"
#include "data/loader.h"
#include "nn/adamw.h"
#include "nn/gpt.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/gemm.h"
#include "runtime/log.h"
#include "runtime/timer.h"

namespace trainer::app {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

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

int model_rows(const data::LoaderConfig& l) {
  if (l.mode != data::Mode::bucket) return l.batch_size;
  return int((l.max_tokens + l.seq_len - 1) / l.seq_len);
}

struct StepStats {
  double loss = 0;  // mean over the step's tokens
  int64_t tokens = 0;
  double grad_norm = 0;
  float lr = 0;
  bool skipped = false;
  double data_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
};

class TrainLoop {
 public:
  explicit TrainLoop(const Config& config);
  int run();

 private:
  void resume_or_init();
  std::optional<std::vector<data::Batch>> next_step_batches(int micro, double& data_ms);
  StepStats train_step(std::vector<data::Batch>& batches);
  std::string first_nonfinite_gradient() const;
  double validate();
  void save();
  void log_step(const StepStats& s, double step_s);

  Config config_;
  fs::path run_dir_;
  data::LoaderConfig loader_config_;
  nn::LrSchedule schedule_;
  nn::GPT model_;
  std::vector<std::string> frozen_patterns_;
  nn::AdamW optimizer_;
  std::unique_ptr<data::Loader> loader_;
  TrainerState state_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> progress_;
  double gemm_peak_gflops_ = 0;
  Timer run_timer_;
  int64_t first_step_ = 0;
};

TrainLoop::TrainLoop(const Config& config)
    : config_(config),
      run_dir_(fs::path(config.text("run.dir")) / config.text("run.name")),
      loader_config_(loader_config(config, "train")),
      schedule_(lr_schedule(config)),
      model_(model_config(config), model_rows(loader_config_), loader_config_.seq_len),
      frozen_patterns_(config.list("train.freeze")),
      optimizer_(model_.layout(), adamw_config(config), 0, model_.layout().total(),
                 [this](const std::string& name) { return matches_any(name, frozen_patterns_); }) {
  for (const std::string& p : frozen_patterns_) {
    bool any = false;
    for (const nn::ParamInfo& info : model_.layout().params()) any |= matches_any(info.name, {p});
    if (!any) throw UsageError(fmt::format("train.freeze: pattern '{}' matches no parameter", p));
  }
}

void TrainLoop::resume_or_init() {
  const std::string& resume = config_.text("train.resume");
  fs::path from;
  if (resume == "auto") from = latest_checkpoint(run_dir_);
  else if (resume != "none") from = resume;
  std::optional<data::LoaderState> loader_state;
  if (!from.empty()) {
    Checkpoint ckpt = open_checkpoint(from);
    load_checkpoint(ckpt, model_, &optimizer_);
    state_ = ckpt.state;
    loader_state = ckpt.state.loader.get<data::LoaderState>();
    log::info("resumed from {} at step {}", from.string(), state_.step);
  } else {
    model_.init_weights(uint64_t(config_.integer("run.seed")));
  }
  loader_ = std::make_unique<data::Loader>(loader_config_, 0, 1, loader_state);
  const uint64_t data_tokenizer = loader_->corpus().manifest().tokenizer_hash;
  if (!from.empty())
    CHECK(state_.tokenizer_hash == data_tokenizer,
          "checkpoint {} was trained with tokenizer {:016x} but {} was made with {:016x}",
          from.string(), state_.tokenizer_hash, loader_config_.data_dir.string(), data_tokenizer);
  state_.tokenizer_hash = data_tokenizer;
  first_step_ = state_.step;
  metrics_ = std::make_unique<MetricsLog>(run_dir_ / "metrics.jsonl", from.empty() ? -1 : state_.step);
}

std::optional<std::vector<data::Batch>> TrainLoop::next_step_batches(int micro, double& data_ms) {
  Timer t;
  std::vector<data::Batch> batches;
  const int64_t seq = scheduled_value(config_, "train.seq_len_schedule", state_.step,
                                      loader_config_.seq_len);
  for (int i = 0; i < micro; ++i) {
    std::optional<data::Batch> b = loader_->next();
    if (!b) return std::nullopt;
    truncate_batch(*b, int(std::min<int64_t>(seq, loader_config_.seq_len)));
    batches.push_back(std::move(*b));
  }
  data_ms = t.ms();
  return batches;
}

StepStats TrainLoop::train_step(std::vector<data::Batch>& batches) {
  StepStats s;
  for (const data::Batch& b : batches) s.tokens += b.loss_tokens;
  CHECK(s.tokens > 0, "step {} has no loss tokens", state_.step + 1);
  double loss_sum = 0;
  model_.zero_grads();
  for (const data::Batch& b : batches) {
    Timer t;
    loss_sum += model_.forward(view_of(b)).sum;
    s.forward_ms += t.ms();
    t.reset();
    model_.backward(1.0f / float(s.tokens));
    s.backward_ms += t.ms();
  }
  Timer t;
  s.loss = loss_sum / double(s.tokens);
  s.grad_norm = std::sqrt(nn::sum_squares(model_.grads(), model_.layout().total()));
  s.lr = schedule_.at(state_.step);
  if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    const std::string culprit = std::isfinite(s.loss) ? first_nonfinite_gradient() : "the loss";
    if (config_.text("train.on_nonfinite") == "stop")
      THROW_ERROR("step {}: non-finite value in {} (loss {}, grad norm {}); set "
                  "train.on_nonfinite=skip to skip such steps",
                  state_.step + 1, culprit, s.loss, s.grad_norm);
    log::warn("step {}: non-finite value in {}; step skipped", state_.step + 1, culprit);
    s.skipped = true;
  } else {
    float clip = nn::clip_scale(s.grad_norm, float(config_.real("optimizer.grad_clip")));
    optimizer_.step(model_.params(), model_.grads(), s.lr, clip);
  }
  s.optimizer_ms = t.ms();
  return s;
}

std::string TrainLoop::first_nonfinite_gradient() const {
  for (const nn::ParamInfo& p : model_.layout().params())
    for (int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(model_.grads()[p.offset + i])) return "the gradient of " + p.name;
  return "the gradients";
}

double TrainLoop::validate() {
  data::LoaderConfig vc = loader_config(config_, "val");
  vc.max_epochs = 1;
  data::Loader val(vc, 0, 1);
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < config_.integer("train.val_batches"); ++i) {
    std::optional<data::Batch> b = val.next();
    if (!b) break;
    nn::LossSum ls = model_.forward(view_of(*b));
    sum += ls.sum;
    count += ls.count;
  }
  CHECK(count > 0, "validation split of {} yielded no tokens", vc.data_dir.string());
  return sum / double(count);
}

void TrainLoop::save() {
  state_.loader = loader_->state();
  CheckpointPolicy policy{config_.integer("checkpoint.keep_last"),
                          config_.integer("checkpoint.keep_every")};
  fs::path dir = save_checkpoint(run_dir_, model_, optimizer_, state_, config_.to_yaml(), policy);
  log::info("saved {}", dir.string());
}

void TrainLoop::log_step(const StepStats& s, double step_s) {
  const int64_t total = config_.integer("train.steps");
  const double tok_s = double(s.tokens) / step_s;
  const double flops = model_.config().flops_per_token(int(loader_config_.seq_len)) * tok_s;
  const double mfu = flops / (gemm_peak_gflops_ * 1e9);
  const double elapsed = run_timer_.seconds();
  const double eta = elapsed / double(state_.step - first_step_) * double(total - state_.step);
  const bool line = state_.step % config_.integer("log.every") == 0 || state_.step == total;
  progress_->update(state_.step, s.loss, tok_s, mfu, eta, line);
  if (!line) return;
  metrics_->write({{"step", state_.step},
                   {"loss", s.loss},
                   {"lr", s.lr},
                   {"grad_norm", s.grad_norm},
                   {"tokens", state_.tokens_seen},
                   {"skipped", s.skipped},
                   {"tokens_per_s", tok_s},
                   {"mfu", mfu},
                   {"step_ms", step_s * 1e3},
                   {"data_ms", s.data_ms},
                   {"forward_ms", s.forward_ms},
                   {"backward_ms", s.backward_ms},
                   {"optimizer_ms", s.optimizer_ms},
                   {"rss_mib", resident_mib()}});
}

int TrainLoop::run() {
  fs::create_directories(run_dir_);
  log::set_file((run_dir_ / "train.log").string());
  write_file_atomic(run_dir_ / "config.yaml", config_.to_yaml());
  resume_or_init();
  const int64_t total = config_.integer("train.steps");
  gemm_peak_gflops_ = measure_gemm_gflops(1024, 0.3);
  log::info("model: {} parameters, {:.1f} MiB activations; GEMM peak {:.0f} GFLOP/s",
            model_.layout().total(), model_.activation_layout().bytes() / 1048576.0,
            gemm_peak_gflops_);
  progress_ = std::make_unique<Progress>(config_.text("log.progress"), total);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) std::signal(sig, on_stop_signal);
  const int64_t val_every = config_.integer("train.val_every");
  const int64_t ckpt_every = config_.integer("checkpoint.every");
  run_timer_.reset();
  while (state_.step < total) {
    if (g_stop_signal) {
      progress_->finish();
      log::info("signal {} received: saving a checkpoint at step {} and stopping",
                int(g_stop_signal), state_.step);
      save();
      return 0;
    }
    Timer step_timer;
    const int micro = int(scheduled_value(config_, "train.grad_accum_schedule", state_.step,
                                          config_.integer("train.grad_accum")));
    double data_ms = 0;
    auto batches = next_step_batches(micro, data_ms);
    if (!batches) {
      log::info("data.epochs = {} reached at step {}", loader_config_.max_epochs, state_.step);
      break;
    }
    StepStats s = train_step(*batches);
    s.data_ms = data_ms;
    ++state_.step;
    state_.tokens_seen += s.tokens;
    log_step(s, step_timer.seconds());
    if (val_every > 0 && (state_.step % val_every == 0 || state_.step == total)) {
      double v = validate();
      progress_->finish();
      log::info("step {}: val loss {:.4f} (perplexity {:.2f})", state_.step, v, std::exp(v));
      metrics_->write({{"step", state_.step}, {"val_loss", v}, {"val_perplexity", std::exp(v)}});
    }
    if (ckpt_every > 0 && state_.step % ckpt_every == 0 && state_.step < total) {
      progress_->finish();
      save();
    }
  }
  progress_->finish();
  save();
  log::info("done: {} steps, {} tokens in {:.1f} s", state_.step, state_.tokens_seen,
            run_timer_.seconds());
  return 0;
}

}  // namespace

int run_training(const Config& config) {
  TrainLoop loop(config);
  return loop.run();
}

}  // namespace trainer::app
