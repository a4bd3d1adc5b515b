// Pipeline parallelism's step (Note [Pipeline transfers]): one stage's forward and backward
// passes of a step's micro-batches in its schedule's order (dist/pipeline_schedule.h), the
// residual stream and its gradient passed between neighbouring stages point to point.
#pragma once

#include <functional>
#include <vector>

#include "dist/communicator.h"
#include "dist/pipeline_schedule.h"
#include "nn/model.h"
#include "runtime/buffer.h"

namespace trainer::dist {

// Note [Pipeline transfers]
// Every stage of a pipeline loads the same batches (they read the same data, as a tensor
// group does), so a transfer's shape is known to both sides and nothing but activations and
// their gradients crosses: the residual stream (fp32, this tensor rank's tokens) at a chunk's
// output, to the stage of the next virtual stage, and its gradient back. Every transfer goes
// through a staging buffer of the pipeline's own: a receive is posted before the action ahead
// of the one that needs it runs (so it overlaps that action's compute) and copied into its
// slot when its action starts; a send copies its data out and is never waited for until the
// step ends, so a stage blocks only on receives. Transfers are matched by tag (micro-batch,
// the receiving chunk, direction), so their order between two stages never matters; a stage
// waits only for data its schedule needs, so a schedule whose passes' dependencies hold on
// every stage (tests/dist/pipeline_schedule_test.cpp simulates them) cannot deadlock. A stage
// that never answers fails the transfer after dist.timeout_s, naming that stage.
class Pipeline {
 public:
  // `comm`: the pipeline group, its rank the stage. `model`: this stage's, built with `slots`
  // activation slots (max_in_flight of the schedule at the most micro-batches a step runs).
  Pipeline(Communicator& comm, nn::Model& model, PipelineSchedule schedule, int chunks, int slots);
  // Waits for the transfers still in flight; while an exception unwinds (the job is ending,
  // and MPI may still write into them) it leaves their buffers to the process instead.
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  struct Times {
    double compute_s = 0;  // forward and backward passes
    double idle_s = 0;     // waiting for the neighbours' transfers: the bubble
  };
  // Runs the step's micro-batches (the same on every stage) through every chunk forward and
  // backward, calling before_micro_batch() before each one's first pass here; the loss scale is
  // backward's (1 / the global token count).
  Times train(const std::vector<nn::BatchView>& batches, float loss_scale,
              const std::function<void()>& before_micro_batch);
  // One batch forward through every stage (validation); the last stage adds its loss. Returns
  // the batch's counted targets.
  int64_t forward(const nn::BatchView& batch);

  int stages() const { return comm_.size(); }
  int stage() const { return comm_.rank(); }

 private:
  struct Transfer {  // in flight, through staging buffer `buffer`, for or from `action`
    Work work;
    int buffer = -1;
    PipelineAction action;
    bool send = false;
  };
  Times run(const std::vector<PipelineAction>& actions, const std::vector<nn::BatchView>& batches,
            float loss_scale, const std::function<void()>& before_micro_batch);
  void pass(const PipelineAction& a, Transfer& received, const std::vector<nn::BatchView>& batches,
            float loss_scale, Times& times);
  int virtual_stage(int chunk) const { return chunk * stages() + stage(); }
  int last_virtual_stage() const { return chunks_ * stages() - 1; }
  // The slot of micro-batch m, taken and the batch loaded at its first pass here.
  int slot_of(int m, const std::vector<nn::BatchView>& batches, int64_t* counted = nullptr);
  // The receive action `a` needs (none where it starts the model or ends it), posted.
  Transfer post_receive(const PipelineAction& a, const nn::BatchView& batch);
  void send(const PipelineAction& a, const Tensor& data);
  // A free staging buffer of at least `bytes`.
  int staging(size_t bytes);
  // Waits for `t`; a failure names this stage and the one it waits for.
  void wait(Transfer& t, Times& times);
  // Releases the staging buffers of the sends that are done (all: waits for every one).
  void reap_sends(bool all, Times& times);
  static int tag(bool forward, int micro, int chunk);

  Communicator& comm_;
  nn::Model& model_;
  PipelineSchedule schedule_;
  int chunks_;
  std::vector<int> slot_micro_;  // by slot: its micro-batch, or -1
  std::vector<Buffer> staging_;
  std::vector<bool> staging_busy_;
  std::vector<Transfer> sends_;  // not yet known to be done
  Transfer next_;                // the receive posted for the next action
};

}  // namespace trainer::dist
