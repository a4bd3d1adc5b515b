// What the loop reports: metrics lines and progress, the set-up it logs, write failures (Note
// [Write failures]) and a stop's checkpoint and marker (Note [Stop marker]).
#include "app/train_loop.h"

#include <optional>

#include <fmt/ranges.h>

#include "app/memory_plan.h"
#include "app/run_checkpoints.h"
#include "app/stop_signals.h"
#include "dist/step_stats.h"
#include "nn/pipeline_split.h"
#include "runtime/error.h"
#include "runtime/fallback.h"
#include "runtime/file_io.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/trace.h"

namespace trainer::app {

namespace fs = std::filesystem;

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
  if (metrics_failed_) return metrics_->why();
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
  // A skipped step always gets its line: the metrics count every skip.
  const bool line = state_.step % rc_.log_every == 0 || state_.step == total || s.skipped;
  // Every rank takes part in the straggler report at every step (it is a collective): a
  // straggler is a rank behind on several steps in a row (Note [Stragglers]).
  std::optional<dist::StragglerReport> ranks;
  if (comm_.size() > 1) ranks = dist::gather_step_times(comm_, s.times);
  if (!leader_) return;
  if (ranks)
    if (const auto warning = stragglers_.observe(*ranks))
      log::warn("step {}: {}", state_.step, *warning);
  const double tok_s = double(s.tokens) / step_s;
  const double flops = token_flops_.at(s.seq_len) * tok_s;
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
                      {"skips", nonfinite_.skips()},
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
  if (!s.spike.empty()) j["spike"] = s.spike;
  if (const auto& m = loader_->state().mixture)  // each source's real tokens so far
    for (size_t i = 0; i < rc_.source_names.size(); ++i)
      j["tokens_from_" + rc_.source_names[i]] = m->tokens[i];
  if (grid_.pipeline_size() > 1) j["bubble"] = s.bubble;  // the stages' pooled idle share
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
  // What this rank's links carried for each group since the last line (docs/dist.md,
  // "Communication per step", gives the closed form).
  auto carried = [&](const char* key, dist::Communicator& group, dist::CommStats& logged) {
    if (group.size() == 1) return;
    const dist::CommStats now = group.stats();
    j[key] = now.bus_bytes - logged.bus_bytes;
    logged = now;
  };
  carried("tensor_bus_bytes", grid_.tensor(), tensor_logged_);
  carried("data_bus_bytes", data_, data_logged_);
  write_metrics(j);
}

// Saves a checkpoint and says why the run stops here; returns the exit code.
// Note [Stop marker]: a launcher may not pass the ranks' exit code on (mpirun that got the
// SIGINT itself exits 1 although every rank exited 75), so rank 0 also records the stop in
// run_dir/stopped once its checkpoint is saved; the launch scripts remove it before they
// start the job and report 75 when the job failed with it present. Written last, after the
// checkpoint: it never claims a stop whose checkpoint is not there.
// A collective: the signal is the lowest-numbered rank's that received one (rank 0 may have
// received none), recorded with that rank.
void TrainLoop::mark_stopped() {
  std::vector<double> signals(size_t(comm_.size()), 0.0);
  signals[size_t(comm_.rank())] = stop_signal_received();
  if (comm_.size() > 1) comm_.all_reduce(signals);
  if (!leader_) return;
  int rank = 0;
  while (rank + 1 < comm_.size() && signals[size_t(rank)] == 0) ++rank;
  try {
    const nlohmann::json marker = {{"step", state_.step},
                                   {"signal", signal_name(int(signals[size_t(rank)]))},
                                   {"rank", rank},
                                   {"exit_code", kExitStopped},
                                   {"checkpoint", latest_checkpoint(rc_.run_dir).string()}};
    write_file_atomic(rc_.run_dir / kStoppedMarker, marker.dump() + "\n");
  } catch (const std::exception& e) {  // the checkpoint is saved: the run still exits 75
    log::warn("cannot write the stop marker {}: {}", (rc_.run_dir / kStoppedMarker).string(),
              e.what());
  }
}

int TrainLoop::stop_early(const std::string& why, int exit_code) {
  if (trace::on()) write_trace();  // the steps recorded so far
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
      nn::kRecomputeNames.name(e.recompute),
      e.recompute_layers.empty() ? "" : fmt::format(" on {} blocks", e.recompute_layers.size()));
  int64_t all = 0, trained = 0;  // of this rank's slice, as above
  for (const nn::ParamInfo& p : model_.layout().params()) {
    all += p.numel;
    if (!is_frozen(p, rc_)) trained += p.numel;
  }
  const nn::LoraConfig& lora = rc_.model.lora;
  if (trained < all)
    log::info("trained: {} of the {} parameters ({:.2f}%), {}", trained, all,
              100.0 * double(trained) / double(all),
              lora.on() ? fmt::format("LoRA adapters of rank {} on {}", lora.rank,
                                      fmt::join(lora.targets, ", "))
                        : std::string("the rest frozen by train.freeze"));
  log::info("learning rate: {}", rc_.schedule.describe());
  if (const nn::DropoutRates& d = rc_.model.dropout; d.any())
    log::info(
        "dropout in training: embeddings {:g}, attention probabilities {:g}, residual "
        "branches {:g}, LoRA adapters' input {:g}{}",
        d.embedding, d.attention, d.residual, d.adapter,
        e.device != Device::cuda ? ""
        : d.attention > 0
            ? " (on CUDA: attention by the trainer's own kernel, not cuDNN, which draws other "
              "masks; no step captured as a CUDA graph)"
            : " (on CUDA: no step captured as a CUDA graph)");
  if (!rc_.source_names.empty()) {
    std::vector<std::string> sources;
    for (size_t i = 0; i < rc_.source_names.size(); ++i) {
      const data::MixtureSource& s = rc_.train_data.mixture.sources[i];
      sources.push_back(
          fmt::format("{} {:g}{}", rc_.source_names[i], s.weight,
                      s.max_epochs ? fmt::format(" (at most {} epochs)", s.max_epochs) : ""));
    }
    log::info("data: a mixture of {}{}", fmt::join(sources, ", "),
              rc_.train_data.mixture.phases.empty()
                  ? ""
                  : fmt::format("; {} phase(s) of other weights from step {}",
                                rc_.train_data.mixture.phases.size(),
                                rc_.train_data.mixture.phases.front().step));
  }
  const MemoryPlan plan = memory_plan();
  const dist::StateBytes& st = plan.state;
  log::info(
      "memory plan per rank: {:.1f} MiB (sharding {}: fp32 masters {:.1f}, working weights "
      "{:.1f}, gradients {:.1f}, optimizer {:.1f}, buffers {:.1f}; activations {:.1f}, workspace "
      "{:.1f}{}); {}",
      plan.total() / kMiB, dist::kShardingStageNames.name(dp_->sharding()), st.masters / kMiB,
      st.working / kMiB, st.grads / kMiB, st.optimizer / kMiB, st.buffers / kMiB,
      mem.activations / kMiB, mem.workspace / kMiB,
      plan.checkpoint ? fmt::format("; checkpoint.async's host copy {:.1f}", plan.checkpoint / kMiB)
                      : "",
      grid_.describe());
  if (grid_.pipeline_size() > 1) {  // the stages' layers and compute (Note [Pipeline stages])
    const int P = grid_.pipeline_size();
    const std::vector<double> flops = nn::stage_flops(rc_.model, rc_.pipeline_split, P);
    std::vector<std::string> stages;
    for (int s = 0; s < P; ++s) {
      std::vector<std::string> runs;
      for (const auto& [b, e] : nn::stage_slice(rc_.pipeline_split, P, s).chunks)
        runs.push_back(fmt::format("{}-{}", b, e - 1));
      stages.push_back(
          fmt::format("{} ({:.2f} GFLOP/token)", fmt::join(runs, ","), flops[s] / 1e9));
    }
    log::info(
        "pipeline: {} stages, schedule {}, layers {}; this stage {} holds {} micro-batch(es) "
        "at once",
        P, dist::kPipelineScheduleNames.name(rc_.pipeline_schedule), fmt::join(stages, " | "),
        grid_.stage(), rc_.exec.activation_slots);
  }
  log::info("MFU against {}", peak_.source);
}

// The model's state as this rank holds it, and the model's own activations and scratch.
MemoryPlan TrainLoop::memory_plan() const {
  return {dp_->state_bytes(), transformer_.memory(), data::Loader::planned_bytes(loader_->config()),
          snapshot_ ? snapshot_->bytes() : 0, rc_.exec.device};
}

}  // namespace trainer::app
