// One training step at any layout (docs/architecture.md, "Data flow of one training step"):
// this rank's micro-batches through its model slice, as a P-stage pipeline (P = 1: the plain
// path), the gradients summed over the data group, the tied embedding's copies summed across
// the end stages, and the step's scalars agreed over the world. The training loop gives it
// batches and takes a StepResult; it knows nothing of stages, Join's padding or norm shares.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dist/data_parallel.h"
#include "dist/grid.h"
#include "dist/join.h"
#include "dist/pipeline.h"
#include "dist/pipeline_schedule.h"
#include "dist/step_stats.h"
#include "nn/model.h"

namespace trainer::dist {

struct TrainStepConfig {
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // dist.pipeline_schedule
  int chunks = 1;                                             // dist.pipeline_virtual_stages
  int activation_slots = 1;  // micro-batches a stage holds at once (ExecConfig)
  bool exact_norm = false;   // dist.deterministic (Note [Exact sum of squares])
};

// What a rank brings to the step's agreement besides its gradients.
struct StepFlags {
  bool stop_requested = false;  // a stop signal reached this rank
  bool write_failed = false;    // this rank could not write its metrics or log
  bool save_writing = false;    // this rank's checkpoint write is in flight (checkpoint.async)
};

// The step as every rank agreed on it (the same on each).
struct StepResult {
  double loss_sum = 0;  // over the global batch's loss tokens
  double grad_norm = 0;
  double bubble = 0;  // pipeline: the stages' idle share of their step, pooled
  bool stop_requested = false, write_failed = false, save_writing = false;  // on some rank
  StepTimes times;  // this rank's forward, backward and exposed communication
};

class TrainStep {
 public:
  TrainStep(Grid& grid, nn::Model& model, DataParallel& dp, const TrainStepConfig& config);
  ~TrainStep();

  // Runs this rank's micro-batches (none when it has joined; `counts` from exchange_counts) and
  // leaves the summed gradients in the data-parallel layer for its step(); a collective over
  // the world. Join: where other ranks have more micro-batches, this one runs passes that count
  // nothing, so every group's collectives match. `flags` is asked after the passes, just
  // before the agreement, so that a signal that arrived during them counts at this step.
  StepResult run(const std::vector<nn::BatchView>& micro_batches, const StepCounts& counts,
                 const std::function<StepFlags()>& flags);
  // One forward without backward (validation, tasks): the loss tokens it counted here (under
  // pipelining the last stage's count, 0 on the others). A collective across the stages.
  int64_t forward(const nn::BatchView& batch);
  // A forward that counts nothing, where this rank has no batch left but the others' forwards
  // need it (their stages, or their gathers of sharded weights); false where none is needed.
  bool idle_forward();

 private:
  void passes(const std::vector<nn::BatchView>& micro_batches, const StepCounts& counts,
              StepResult& r);
  void sum_tied_embedding(StepTimes& times);
  void agree(StepResult& r, StepFlags flags);

  Grid& grid_;
  nn::Model& model_;
  DataParallel& dp_;
  TrainStepConfig config_;
  std::unique_ptr<GradNormShare> norm_share_;  // tensor or pipeline parallelism: this rank's
  std::unique_ptr<Pipeline> pipeline_;         // pipeline parallelism: this stage's passes
  EmptyRow empty_;                             // a missing micro-batch's stand-in
};

}  // namespace trainer::dist
