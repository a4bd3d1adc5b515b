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
// Every stage of a pipeline stages the same batches (they read the same data, as a tensor
// group does), so a transfer's shape is known to both sides and nothing but activations and
// their gradients crosses: the residual stream (fp32, this tensor rank's tokens) at a chunk's
// output, to the stage of the next virtual stage, and its gradient back. A receive is posted
// before the action ahead of the one that needs it runs, so a transfer overlaps that
// action's compute; a send is started as soon as its data is there and waited for only before
// its slot's activations are written again. Transfers are matched by tag (micro-batch, the
// receiving chunk, direction), so their order between two stages never matters, and a schedule
// whose dependencies hold (tested by simulation) cannot deadlock. A stage that never answers
// fails the transfer after dist.timeout_s, naming that stage.
class Pipeline {
 public:
  // `comm`: the pipeline group, its rank the stage. `model`: this stage's, built with `slots`
  // activation slots (max_in_flight of the schedule at the most micro-batches a step runs).
  Pipeline(Communicator& comm, nn::Model& model, PipelineSchedule schedule, int chunks, int slots);

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
  struct Pending {  // a receive posted for an action
    Work work;
    int grad_buffer = -1;  // a gradient's staging buffer, or -1 (straight into the slot)
  };
  struct Sent {  // a send still reading its slot: what action `from` produced
    Work work;
    PipelineAction from;
  };
  int virtual_stage(int chunk) const { return chunk * stages() + stage(); }
  int last_virtual_stage() const { return chunks_ * stages() - 1; }
  // The slot micro-batch m uses, staged at its first action here.
  int slot_of(int m, const std::vector<nn::BatchView>& batches);
  Pending post_receive(const PipelineAction& a, const std::vector<nn::BatchView>& batches);
  void run(const PipelineAction& a, Pending& received, float loss_scale, Times& times);
  // Waits for a transfer of action `a` (its input received, or with `sent` its output sent);
  // a failure names this stage and the one it waits for.
  void wait(Work& w, const PipelineAction& a, bool sent, Times& times);
  // Waits for the sends still reading slot s.
  void settle_sends(int slot, Times& times);
  static int tag(bool forward, int micro, int chunk);

  Communicator& comm_;
  nn::Model& model_;
  PipelineSchedule schedule_;
  int chunks_;
  std::vector<int> slot_micro_;           // by slot: its micro-batch, or -1
  std::vector<std::vector<Sent>> sends_;  // by slot: sends reading it
  std::vector<Buffer> grad_in_;           // staging for received gradients (2 in turn)
  std::vector<bool> grad_in_busy_;
  int64_t tokens_ = 0;  // of the micro-batch whose gradient is staged (elements per token: C)
};

}  // namespace trainer::dist
