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
// output, to the stage of the next virtual stage, and its gradient back. A stage runs its
// actions in steps and posts one group of transfers before each (Note [Pipeline transfer
// groups] in dist/pipeline_schedule.h): the sends of what the step before produced, copied
// into staging buffers of the pipeline's own as each pass ends, and the receives of what this
// step needs, into staging buffers copied into their slots as each pass starts. A stage waits
// only for its receives; a send's buffer is freed once it is done, and the step ends when all
// are. One order serves MPI (which could match any order by tag) and NCCL (which matches in
// order and runs a group on one stream), so the CPU runs exercise the order GPUs run. A
// stage that never answers fails the transfer after dist.timeout_s, naming that stage.
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
  struct Transfer {  // in flight, through staging buffer `buffer`
    Work work;
    int buffer = -1;
    int64_t count = 0;  // floats
    PipelineTransfer what;
  };
  int virtual_stage(int chunk) const { return chunk * stages() + stage(); }
  int last_virtual_stage() const { return chunks_ * stages() - 1; }
  Times run(const std::vector<PipelineAction>& actions, const std::vector<nn::BatchView>& batches,
            float loss_scale, const std::function<void()>& before_micro_batch);
  // Runs action `a`, its input copied in from its receive among `received`, its output (where
  // a neighbour takes it) copied into a staging buffer for the next group to send.
  void pass(const PipelineAction& a, std::vector<Transfer>& received,
            const std::vector<nn::BatchView>& batches, float loss_scale, Times& times);
  // Posts `group`: its sends from the staged outputs, in order; returns its receives.
  std::vector<Transfer> post(const std::vector<PipelineTransfer>& group,
                             const std::vector<nn::BatchView>& batches);
  // The slot of micro-batch m, taken and the batch loaded at its first pass here.
  int slot_of(int m, const std::vector<nn::BatchView>& batches, int64_t* counted = nullptr);
  // A free staging buffer of at least `bytes`, marked busy.
  int staging(size_t bytes);
  // Waits for `t`; a failure names this stage, the transfer and the stage it waits for.
  void wait(Transfer& t, Times& times);
  // Releases the staging buffers of the sends that are done (all: waits for every one).
  void reap_sends(bool all, Times& times);
  static int tag(const PipelineTransfer& t);

  Communicator& comm_;
  nn::Model& model_;
  PipelineSchedule schedule_;
  int chunks_;
  std::vector<int> slot_micro_;  // by slot: its micro-batch, or -1
  std::vector<Buffer> staging_;
  std::vector<bool> staging_busy_;
  std::vector<Transfer> staged_;  // outputs copied out, for the next group to send
  std::vector<Transfer> sends_;   // posted, not yet known to be done
};

}  // namespace trainer::dist
