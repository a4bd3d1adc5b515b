// train.spike_guard: a step whose loss or gradient norm jumps far above its recent values is
// skipped, or ends the run with a checkpoint of the step before (Note [Spike guard]).
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/enum_names.h"

namespace trainer::app {

enum class SpikeAction : uint8_t { off, skip, stop };
inline constexpr EnumNames<SpikeAction, 3> kSpikeActionNames{
    "train.spike_guard.action",
    {{{SpikeAction::off, "off"}, {SpikeAction::skip, "skip"}, {SpikeAction::stop, "stop"}}}};

// Which of the step's scalars are watched.
enum class SpikeMetric : uint8_t { loss, grad_norm, both };
inline constexpr EnumNames<SpikeMetric, 3> kSpikeMetricNames{
    "train.spike_guard.metric",
    {{{SpikeMetric::loss, "loss"},
      {SpikeMetric::grad_norm, "grad_norm"},
      {SpikeMetric::both, "both"}}}};

class SpikeGuard {
 public:
  struct Policy {
    SpikeAction action = SpikeAction::off;
    SpikeMetric metric = SpikeMetric::both;
    int64_t window = 100;    // steps whose values the mean and deviation are taken over
    double threshold = 6.0;  // standard deviations above the mean that make a spike
  };
  explicit SpikeGuard(const Policy& policy) : policy_(policy) {}

  const Policy& policy() const { return policy_; }
  // What spikes at a step with this (agreed) loss and gradient norm, e.g. "the loss 7.9 is
  // 12.1 standard deviations above the mean 2.31 of the last 100 steps"; empty when nothing
  // does, the guard is off or its window is not yet full.
  std::string spike(double loss, double grad_norm) const;
  // A step whose update was applied: its loss and norm join the windows.
  void accept(double loss, double grad_norm);
  // Empties the windows: from a step where the batch's shape or data changes by schedule, the
  // loss may settle at another level, which is no spike.
  void restart();

  // The windows, for the trainer state of a checkpoint (bit-exact through JSON), and back.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  std::string check(const char* name, const std::deque<double>& window, double x) const;
  void push(std::deque<double>& window, double x) const;

  Policy policy_;
  std::deque<double> losses_, norms_;  // the last accepted steps', oldest first
};

}  // namespace trainer::app
