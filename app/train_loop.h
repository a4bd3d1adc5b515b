// The training loop (run_training's, app/run_training.h): start-up and resume checks
// (train_start.cpp), gradient accumulation over micro-batches, validation, checkpoints, exact
// resume and non-finite handling (train_loop.cpp), metrics, logs and a graceful stop
// (train_report.cpp), and traces (train_trace.cpp). Internal to app/.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/checkpoint.h"
#include "app/checkpoint_save.h"
#include "app/config.h"
#include "app/memory_plan.h"
#include "app/metrics.h"
#include "app/nonfinite.h"
#include "app/run_setup.h"
#include "app/run_training.h"
#include "app/spike_guard.h"
#include "app/task_eval.h"
#include "data/loader.h"
#include "dist/clock_sync.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "dist/grid.h"
#include "dist/join.h"
#include "dist/step_stats.h"
#include "dist/train_step.h"
#include "nn/transformer.h"
#include "runtime/file_io.h"
#include "runtime/timer.h"

namespace trainer::app {

struct StepStats {
  int seq_len = 0;     // the step's row length (the curriculum may shorten it)
  double loss = 0;     // mean over the global batch's tokens
  int64_t tokens = 0;  // loss tokens of the global batch
  double grad_norm = 0;
  float lr = 0;
  bool skipped = false;
  std::string spike;            // what spiked (train.spike_guard), or empty
  bool stop_requested = false;  // a signal reached some rank
  bool write_failed = false;    // rank 0 could not write its metrics or log
  bool save_writing = false;    // some rank's checkpoint write is in flight
  dist::StepTimes times;
  double bubble = 0;  // pipeline: the stages' idle share of their step (waiting for transfers)
};

// What MFU is measured against: log.peak_gflops, or a GEMM peak measured before the model
// allocates (its matrices would otherwise add to the run's peak memory, beyond its plan).
struct PeakReference {
  double gflops = 0;
  std::string source;
};

class TrainLoop {
 public:
  // `rc`: `config` resolved for this rank's device.
  TrainLoop(const Config& config, RunConfig rc, const TrainOptions& options, dist::Grid& grid,
            const PeakReference& peak);
  // Trains to train.steps (or the end of the data, or a stop signal); the exit code.
  int run();

 private:
  void check_batch_over_ranks() const;
  void warn_of_changes(const Checkpoint& ckpt, const Config& saved) const;
  int64_t micro_batches(int64_t step) const;
  void start_up();
  void check_shared_run_dir();
  std::filesystem::path resume_path();
  std::filesystem::path init_path();
  std::string from_leader(std::string text);
  std::vector<std::filesystem::path> check_overwrite(const std::filesystem::path& from,
                                                     int64_t start_step);
  void check_data();
  std::optional<std::vector<data::Batch>> next_step_batches(int micro);
  StepStats train_step(const std::optional<std::vector<data::Batch>>& batches,
                       const dist::StepCounts& counts);
  StepStats update(StepStats& s);
  bool phase_starts(int64_t step) const;
  std::string write_failure() const;
  double validate(const ValSet& set);
  void validate_all();
  void score_tasks();
  void save(const std::optional<data::LoaderState>& loader = std::nullopt,
            bool in_background = false);
  void finish_save();
  [[noreturn]] void stop_at_spike(const StepStats& s, const data::LoaderState& before);
  void log_step(const StepStats& s, double step_s);
  void write_metrics(const nlohmann::json& record);
  void report_write_failure();
  int stop_early(const std::string& why, int exit_code);
  void mark_stopped();  // a collective
  void log_setup();
  void prepare_traces();
  void begin_trace();              // a collective
  void write_trace();              // a collective
  MemoryPlan memory_plan() const;  // this rank's, as its layers account for it

  Config config_;  // as given (paths made absolute): saved with the run, compared across ranks
  RunConfig rc_;   // the same, resolved once
  TrainOptions options_;
  dist::Grid& grid_;          // the world as tensor and data groups (Note [Parallel grid])
  dist::Communicator& comm_;  // the world: agreement, checkpoints, the step's small all-reduce
  dist::Communicator& data_;  // the data-parallel group: batches, Join, the gradients' sums
  bool leader_;               // rank 0 writes metrics, logs and checkpoints
  std::unique_ptr<ExclusiveLock> lock_;
  std::string tokenizer_;  // the tokenizer's bytes, kept in the run and every checkpoint
  uint64_t tokenizer_hash_ = 0;
  std::string data_manifest_;  // the corpus's manifest.json as the run started
  nn::Transformer transformer_;
  dist::CommTensorGroup tensor_group_;      // the model's other slices (tensor parallelism)
  nn::Model& model_;                        // what the loop uses of it
  std::unique_ptr<dist::DataParallel> dp_;  // how the ranks share its state
  std::unique_ptr<dist::TrainStep> step_;   // the step's passes and agreement at this layout
  dist::Join join_;
  std::unique_ptr<data::Loader> loader_;
  TrainerState state_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> progress_;
  PeakReference peak_;
  nn::TokenFlops token_flops_;  // what a token costs, for MFU
  int64_t saved_step_ = -1;     // the step of the checkpoint written or resumed from last
  bool val_verified_ = false;
  std::vector<Task> tasks_;  // train.eval_tasks, read and tokenized at the start
  bool metrics_failed_ = false, write_failure_reported_ = false;
  Timer run_timer_;
  int64_t first_step_ = 0, first_tokens_ = 0;  // where this launch started
  dist::CommStats comm_logged_;                // the communicator's totals at the last metrics line
  dist::CommStats tensor_logged_, data_logged_;  // the groups' likewise
  dist::StragglerWatch stragglers_;  // rank 0: the current streak of one lagging rank or node
  NonFiniteGuard nonfinite_;         // what a step or a save does with NaN and Inf
  SpikeGuard spikes_;                // train.spike_guard's windows
  // log.trace_steps (Note [Traces]): the first step recorded, and this rank's clock against
  // rank 0's as the recording began.
  int64_t traced_from_ = 0;
  dist::ClockOffset trace_clock_begin_;
  // checkpoint.async (Note [Asynchronous checkpoints]): this rank's host copy, where it writes
  // tensors, and the save whose write is in flight (destroyed first: it reads the model).
  std::unique_ptr<SaveSnapshot> snapshot_;
  std::unique_ptr<CheckpointSave> pending_save_;
};

}  // namespace trainer::app
