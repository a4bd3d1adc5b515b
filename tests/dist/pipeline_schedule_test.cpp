// Pipeline schedules (Note [Pipeline schedules]) checked by simulating every stage at once:
// each runs its actions in order, an action starting when its stage is free and its inputs
// have arrived (a forward needs the previous virtual stage's forward, a backward the next
// virtual stage's backward and its own forward), transfers taking no time. A schedule whose
// dependencies cycle never finishes, which is what a deadlock of the real transfers would be.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "dist/pipeline_schedule.h"
#include "runtime/error.h"

namespace trainer::dist {
namespace {

struct Simulation {
  bool finished = false;
  double makespan = 0;
  std::vector<double> busy;  // per stage
};

// Forward costs 1/V and backward 2/V per chunk (a chunk is 1/V of a stage's layers).
Simulation simulate(PipelineSchedule s, int P, int M, int V) {
  std::vector<std::vector<PipelineAction>> actions;
  for (int stage = 0; stage < P; ++stage) actions.push_back(pipeline_actions(s, P, stage, M, V));
  std::map<std::tuple<bool, int, int>, double> done;  // (forward, micro, virtual stage) -> end
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> free_at(size_t(P), 0);
  Simulation sim;
  sim.busy.assign(size_t(P), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int stage = 0; stage < P; ++stage) {
      auto& list = actions[size_t(stage)];
      size_t& i = next[size_t(stage)];
      if (i == list.size()) continue;
      const PipelineAction& a = list[i];
      const int v = a.chunk * P + stage;
      std::vector<std::tuple<bool, int, int>> needs;
      if (a.forward && v > 0) needs.push_back({true, a.micro, v - 1});
      if (!a.forward) {
        needs.push_back({true, a.micro, v});
        if (v < P * V - 1) needs.push_back({false, a.micro, v + 1});
      }
      double start = free_at[size_t(stage)];
      bool ready = true;
      for (const auto& n : needs) {
        auto it = done.find(n);
        if (it == done.end()) {
          ready = false;
          break;
        }
        start = std::max(start, it->second);
      }
      if (!ready) continue;
      const double cost = (a.forward ? 1.0 : 2.0) / V;
      free_at[size_t(stage)] = start + cost;
      sim.busy[size_t(stage)] += cost;
      done[{a.forward, a.micro, v}] = start + cost;
      ++i;
      progress = true;
    }
  }
  sim.finished = true;
  for (int stage = 0; stage < P; ++stage)
    sim.finished &= next[size_t(stage)] == actions[size_t(stage)].size();
  sim.makespan = *std::max_element(free_at.begin(), free_at.end());
  return sim;
}

struct Case {
  PipelineSchedule schedule;
  int P, M, V;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int P : {2, 3, 4, 8})
    for (int M : {1, 2, 3, 4, 8, 16}) {
      out.push_back({PipelineSchedule::gpipe, P, M, 1});
      out.push_back({PipelineSchedule::one_f_one_b, P, M, 1});
      for (int V : {2, 3, 4})
        if (M % P == 0) out.push_back({PipelineSchedule::interleaved, P, M, V});
    }
  return out;
}

TEST(PipelineSchedule, EveryPassOnceInMicroBatchOrderPerChunk) {
  for (const Case& c : cases())
    for (int stage = 0; stage < c.P; ++stage) {
      const auto actions = pipeline_actions(c.schedule, c.P, stage, c.M, c.V);
      ASSERT_EQ(actions.size(), size_t(2 * c.M * c.V));
      std::vector<std::vector<int>> forwards(size_t(c.V)), backwards(size_t(c.V));
      for (const PipelineAction& a : actions)
        (a.forward ? forwards : backwards)[size_t(a.chunk)].push_back(a.micro);
      for (int v = 0; v < c.V; ++v)
        for (int m = 0; m < c.M; ++m) {
          EXPECT_EQ(forwards[size_t(v)][size_t(m)], m);
          // Each gradient sums the micro-batches in the order one process does.
          EXPECT_EQ(backwards[size_t(v)][size_t(m)], m);
        }
    }
}

TEST(PipelineSchedule, NoDeadlockAndTheBubbleOfTheTheory) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << kPipelineScheduleNames.name(c.schedule) << " P=" << c.P
                                      << " M=" << c.M << " V=" << c.V);
    const Simulation sim = simulate(c.schedule, c.P, c.M, c.V);
    ASSERT_TRUE(sim.finished);
    for (double busy : sim.busy) EXPECT_NEAR(busy, 3.0 * c.M, 1e-9);
    // Equal stages and free transfers: (P - 1) / (V M + P - 1) exactly (M >= P for
    // interleaved's warm-up to fill; with fewer micro-batches 1F1B and GPipe still reach it).
    const double bubble = (sim.makespan - 3.0 * c.M) / sim.makespan;
    EXPECT_NEAR(bubble, bubble_fraction(c.schedule, c.P, c.M, c.V), 1e-9);
  }
}

TEST(PipelineSchedule, ActivationsHeld) {
  for (int P : {2, 4, 8})
    for (int M : {1, 4, 8, 16})
      for (int stage = 0; stage < P; ++stage) {
        // 1F1B: P - stage micro-batches at most; GPipe: all of them.
        EXPECT_EQ(max_in_flight(pipeline_actions(PipelineSchedule::one_f_one_b, P, stage, M, 1)),
                  std::min(M, P - stage));
        EXPECT_EQ(max_in_flight(pipeline_actions(PipelineSchedule::gpipe, P, stage, M, 1)), M);
      }
  // Interleaved holds more micro-batches: stage 0 of 4 with 2 chunks and 8 micro-batches warms
  // up with (4 - 1) x 2 + (2 - 1) x 4 = 10 chunk forwards (micro-batches 0-5), and its steady
  // state starts micro-batches 6 and 7 before its first chunk-0 backward frees micro-batch 0.
  EXPECT_EQ(max_in_flight(pipeline_actions(PipelineSchedule::interleaved, 4, 0, 8, 2)), 8);
}

// Note [Pipeline transfer groups] under NCCL's rules: each stage posts its groups in order,
// the next only once every transfer of the current one has met its partner, which is the
// transfer posted in the same place of the same ordered channel (sender, receiver) on the
// other stage. Returns the first problem: a pair that meets but is not the same transfer
// (micro-batch, direction, receiving chunk), or a stage that never posts its last group; ""
// if none.
std::string transfer_problem(const std::vector<std::vector<PipelineAction>>& actions, int P,
                             int V) {
  std::vector<std::vector<PipelineStep>> steps;
  for (int s = 0; s < P; ++s) steps.push_back(pipeline_steps(actions[size_t(s)], P, s, V));
  // By ordered channel (from, to): what was posted there, on each side, in order.
  std::map<std::pair<int, int>, std::vector<PipelineTransfer>> sent, received;
  std::vector<size_t> at(size_t(P), 0);  // each stage's current step
  std::vector<bool> posted(size_t(P), false);
  // Where each transfer of each stage's current group sits in its channel.
  std::vector<std::vector<size_t>> place{size_t(P)};
  auto same = [](PipelineTransfer a, PipelineTransfer b) {
    a.send = b.send;
    a.peer = b.peer;
    return a == b;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      const size_t j = at[size_t(s)];
      if (j == steps[size_t(s)].size()) continue;
      const auto& group = steps[size_t(s)][j].before;
      if (!posted[size_t(s)]) {
        place[size_t(s)].clear();
        for (const PipelineTransfer& t : group) {
          auto& channel = t.send ? sent[{s, t.peer}] : received[{t.peer, s}];
          place[size_t(s)].push_back(channel.size());
          channel.push_back(t);
        }
        posted[size_t(s)] = progress = true;
      }
      bool met = true;
      for (size_t k = 0; k < group.size(); ++k) {
        const PipelineTransfer& t = group[k];
        const auto& other = t.send ? received[{s, t.peer}] : sent[{t.peer, s}];
        if (other.size() <= place[size_t(s)][k]) {
          met = false;
          continue;
        }
        if (!same(other[place[size_t(s)][k]], t))
          return "stage " + std::to_string(s) + " step " + std::to_string(j) + ": mismatch";
      }
      if (!met) continue;
      ++at[size_t(s)];
      posted[size_t(s)] = false;
      progress = true;
    }
  }
  for (int s = 0; s < P; ++s)
    if (at[size_t(s)] != steps[size_t(s)].size())
      return "stage " + std::to_string(s) + " waits at step " + std::to_string(at[size_t(s)]);
  return "";
}

TEST(PipelineSchedule, TransferGroupsMeetInOrderAndFinish) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << kPipelineScheduleNames.name(c.schedule) << " P=" << c.P
                                      << " M=" << c.M << " V=" << c.V);
    std::vector<std::vector<PipelineAction>> actions, forward_only;
    for (int s = 0; s < c.P; ++s) {
      actions.push_back(pipeline_actions(c.schedule, c.P, s, c.M, c.V));
      forward_only.emplace_back();  // validation: one micro-batch through every chunk
      for (int chunk = 0; chunk < c.V; ++chunk) forward_only.back().push_back({true, 0, chunk});
    }
    EXPECT_EQ(transfer_problem(actions, c.P, c.V), "");
    EXPECT_EQ(transfer_problem(forward_only, c.P, c.V), "");
    // Every pass but the model's first forward and last backward receives once, and every pass
    // but the first backward and the last forward sends once: 2 (P V - 1) M transfers a side.
    size_t sends = 0, receives = 0;
    for (int s = 0; s < c.P; ++s)
      for (const PipelineStep& step : pipeline_steps(actions[size_t(s)], c.P, s, c.V))
        for (const PipelineTransfer& t : step.before) ++(t.send ? sends : receives);
    EXPECT_EQ(sends, size_t(2 * (c.P * c.V - 1) * c.M));
    EXPECT_EQ(receives, sends);
  }
}

// The simulation sees a deadlock: stage 0 joins micro-batch 0's backward to its forward, so
// it waits for a gradient before it sends the activations stage 1 computes that gradient from.
TEST(PipelineSchedule, TransferSimulationSeesADeadlock) {
  PipelineAction backward{false, 0, 0};
  backward.joins_previous = true;
  EXPECT_EQ(transfer_problem({{{true, 0, 0}, backward}, {{true, 0, 0}, {false, 0, 0}}}, 2, 1),
            "stage 0 waits at step 0");
  EXPECT_EQ(transfer_problem({{{true, 0, 0}, {false, 0, 0}}, {{true, 0, 0}, {false, 0, 0}}}, 2, 1),
            "");
}

// And a transfer that meets another: stage 1 takes micro-batch 1 first, while NCCL hands it
// micro-batch 0's activations, the first that stage 0 sent.
TEST(PipelineSchedule, TransferSimulationSeesAMismatch) {
  const std::vector<std::vector<PipelineAction>> actions = {
      {{true, 0, 0}, {true, 1, 0}, {false, 0, 0}, {false, 1, 0}},
      {{true, 1, 0}, {true, 0, 0}, {false, 0, 0}, {false, 1, 0}}};
  EXPECT_EQ(transfer_problem(actions, 2, 1), "stage 0 step 1: mismatch");
}

TEST(PipelineSchedule, Names) {
  EXPECT_EQ(kPipelineScheduleNames.parse("1f1b"), PipelineSchedule::one_f_one_b);
  EXPECT_EQ(kPipelineScheduleNames.parse("interleaved"), PipelineSchedule::interleaved);
  EXPECT_THROW(kPipelineScheduleNames.parse("zero-bubble"), UsageError);
}

}  // namespace
}  // namespace trainer::dist
