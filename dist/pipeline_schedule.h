// Pipeline schedules (Note [Pipeline schedules]): the order in which one stage runs the
// forward and backward passes of a step's micro-batches, as a list of actions. Pure functions
// of (schedule, stages, stage, micro-batches, chunks), tested by simulating every stage.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/enum_names.h"

namespace trainer::dist {

enum class PipelineSchedule : uint8_t { gpipe, one_f_one_b, interleaved };

inline constexpr EnumNames<PipelineSchedule, 3> kPipelineScheduleNames{
    "dist.pipeline_schedule",
    {{{PipelineSchedule::gpipe, "gpipe"},
      {PipelineSchedule::one_f_one_b, "1f1b"},
      {PipelineSchedule::interleaved, "interleaved"}}}};

// One pass of one micro-batch through one of this stage's chunks (virtual stages).
struct PipelineAction {
  bool forward = true;
  int micro = 0;  // the micro-batch, 0..M-1
  int chunk = 0;  // this stage's chunk, 0..V-1: virtual stage chunk * P + stage
  // Posts its transfers with the action before it, as one step (Note [Pipeline transfer
  // groups]): the backwards of the interleaved schedule's steady state.
  bool joins_previous = false;
  bool operator==(const PipelineAction&) const = default;
};

// Note [Pipeline schedules]
// P stages, M micro-batches, V chunks per stage (virtual stage v = chunk * P + stage holds the
// v-th of P x V runs of layers). GPipe runs every forward, then every backward (M micro-batches'
// activations held). 1F1B (PipeDream-flush, as Megatron-LM runs it) starts P - 1 - stage
// forwards, then alternates one forward and one backward, then finishes the backwards: at most
// P - stage micro-batches are in flight, and the bubble is (P - 1) / (M + P - 1) of the step.
// Interleaved 1F1B runs the V chunks of each group of P micro-batches in turn (forward chunks
// ascending, backward descending), with (P - 1 - stage) x 2 + (V - 1) x P warm-up forwards:
// the bubble shrinks by V, for more messages; it needs M to be a multiple of P. Backwards run in
// micro-batch order in every schedule, so each gradient sums the micro-batches in the order one
// process does.
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int stages, int stage,
                                             int micro_batches, int chunks);

// One side of a transfer between neighbouring stages: the residual stream (forward) or its
// gradient (backward) of micro-batch `micro`, for the receiving stage's chunk `chunk`.
struct PipelineTransfer {
  bool send = false;  // else a receive
  int peer = 0;       // the other stage
  bool forward = true;
  int micro = 0;
  int chunk = 0;
  bool operator==(const PipelineTransfer&) const = default;
};

// Note [Pipeline transfer groups]
// A stage's actions run in steps: one action, or an action and those that join it
// (PipelineAction::joins_previous). Before step j (and once after the last step) the stage
// posts one group: the sends of what step j - 1 produced, then the receives of what step j
// needs. It posts a group only once the step before has run, and runs a step only once its
// receives have arrived. This is the order NCCL needs: it matches the transfers between two
// ranks in the order they are posted (no tags), and runs a rank's groups in order on one
// stream, a group's transfers together, so two neighbours that send to each other meet in one
// group each instead of waiting behind each other's receive. Single actions suffice for GPipe
// and 1F1B (Megatron-LM's send-forward-receive-backward pairs); the interleaved schedule's
// steady state needs its forward and backward in one step, whose group sends and receives
// both directions at once, as Megatron-LM's does. tests/dist/pipeline_schedule_test.cpp
// simulates those rules for every schedule: every stage finishes, and every transfer meets
// the one it is meant for.
struct PipelineStep {
  size_t first = 0, end = 0;             // its actions: [first, end)
  std::vector<PipelineTransfer> before;  // the group posted before it runs
};
// The steps of `actions` on `stage`, then one without actions whose group sends what the last
// step produced.
std::vector<PipelineStep> pipeline_steps(const std::vector<PipelineAction>& actions, int stages,
                                         int stage, int chunks);

// The most micro-batches a stage's actions hold at once: from a micro-batch's first forward to
// its last backward there (the activation slots the stage needs).
int max_in_flight(const std::vector<PipelineAction>& actions);

// The bubble of a schedule in theory: the fraction of a step a stage is idle, with a backward
// taking twice a forward and no transfer time: (P - 1) / (V M + P - 1) for 1F1B and
// interleaved (V = 1: (P - 1) / (M + P - 1)), the same as 1F1B's for GPipe.
double bubble_fraction(PipelineSchedule schedule, int stages, int micro_batches, int chunks);

// The micro-batches a step of `micro_batches` runs on `stages` stages: the interleaved schedule
// rounds up to a multiple of the stages (the others run them as they are).
int64_t pipeline_micro_batches(PipelineSchedule schedule, int stages, int64_t micro_batches);

}  // namespace trainer::dist
