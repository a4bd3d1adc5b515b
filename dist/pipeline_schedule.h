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
