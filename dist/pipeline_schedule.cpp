#include "dist/pipeline_schedule.h"

#include <algorithm>

#include "runtime/error.h"

namespace trainer::dist {

namespace {

// Megatron-LM's order for interleaved 1F1B: the k-th forward (backward) of a stage takes
// micro-batch groups of P in turn, each through the chunks ascending (descending).
PipelineAction interleaved_action(bool forward, int k, int P, int V) {
  const int group = k / (P * V), in_group = k % (P * V);
  const int chunk = in_group / P;
  return {forward, group * P + in_group % P, forward ? chunk : V - 1 - chunk};
}

}  // namespace

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int P, int stage, int M,
                                             int V) {
  TRAINER_ASSERT(P >= 1 && stage >= 0 && stage < P && M >= 1 && V >= 1,
                 "pipeline of {} stages, stage {}, {} micro-batches, {} chunks", P, stage, M, V);
  std::vector<PipelineAction> out;
  if (schedule == PipelineSchedule::gpipe) {
    TRAINER_ASSERT(V == 1, "GPipe with {} chunks", V);
    for (int m = 0; m < M; ++m) out.push_back({true, m, 0});
    for (int m = 0; m < M; ++m) out.push_back({false, m, 0});
    return out;
  }
  if (schedule == PipelineSchedule::one_f_one_b) TRAINER_ASSERT(V == 1, "1F1B with {} chunks", V);
  TRAINER_ASSERT(V == 1 || M % P == 0, "interleaved: {} micro-batches on {} stages", M, P);
  const int total = M * V;
  int warmup = V == 1 ? P - 1 - stage : (P - 1 - stage) * 2 + (V - 1) * P;
  warmup = std::min(warmup, total);
  auto action = [&](bool forward, int k) {
    return V == 1 ? PipelineAction{forward, k, 0} : interleaved_action(forward, k, P, V);
  };
  for (int k = 0; k < warmup; ++k) out.push_back(action(true, k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(action(true, warmup + k));
    out.push_back(action(false, k));
    out.back().joins_previous = V > 1;  // Note [Pipeline transfer groups]
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(action(false, k));
  return out;
}

std::vector<PipelineStep> pipeline_steps(const std::vector<PipelineAction>& actions, int P,
                                         int stage, int V) {
  const int last = P * V - 1;
  std::vector<PipelineStep> steps;
  for (size_t i = 0; i < actions.size(); ++i)
    if (steps.empty() || !actions[i].joins_previous)
      steps.push_back({i, i + 1, {}});
    else
      steps.back().end = i + 1;
  steps.push_back({actions.size(), actions.size(), {}});
  for (size_t j = 0; j < steps.size(); ++j) {
    if (j > 0)  // what the step before produced, to the virtual stage after or before
      for (size_t i = steps[j - 1].first; i < steps[j - 1].end; ++i) {
        const PipelineAction& a = actions[i];
        const int v = a.chunk * P + stage, to = a.forward ? v + 1 : v - 1;
        if (to >= 0 && to <= last)
          steps[j].before.push_back({true, to % P, a.forward, a.micro, to / P});
      }
    for (size_t i = steps[j].first; i < steps[j].end; ++i) {  // what it needs
      const PipelineAction& a = actions[i];
      const int v = a.chunk * P + stage, from = a.forward ? v - 1 : v + 1;
      if (from >= 0 && from <= last)
        steps[j].before.push_back({false, from % P, a.forward, a.micro, a.chunk});
    }
  }
  return steps;
}

int max_in_flight(const std::vector<PipelineAction>& actions) {
  int held = 0, most = 0;
  for (const PipelineAction& a : actions) {
    if (a.forward && a.chunk == 0) most = std::max(most, ++held);
    if (!a.forward && a.chunk == 0) --held;
  }
  return most;
}

double bubble_fraction(PipelineSchedule schedule, int P, int M, int V) {
  if (schedule != PipelineSchedule::interleaved) V = 1;
  return double(P - 1) / (double(V) * M + P - 1);
}

int64_t pipeline_micro_batches(PipelineSchedule schedule, int stages, int64_t micro_batches) {
  if (schedule != PipelineSchedule::interleaved) return micro_batches;
  return (micro_batches + stages - 1) / stages * stages;
}

}  // namespace trainer::dist
