// Learning-rate schedules: linear warmup from 0, a constant phase, then a decay of a chosen
// shape to a floor. The decay spans every step after warmup (decay_steps 0: cosine and linear
// schedules) or only the last decay_steps steps (warmup-stable-decay, Note [WSD]).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/enum_names.h"

namespace trainer::nn {

struct LrSchedule {
  enum class Decay { cosine, linear, one_minus_sqrt, constant };
  float max_lr = 3e-4f;
  float min_lr = 3e-5f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  int64_t decay_steps = 0;  // the decay's length at the end (0: from the end of warmup)
  Decay decay = Decay::cosine;

  // The learning rate for step `step` (0-based).
  float at(int64_t step) const;
  // The first step of the decay (total_steps for a constant schedule).
  int64_t decay_start() const;
  // Throws a UsageError naming the keys when warmup and decay do not fit in total_steps.
  void validate() const;
  // One line for the log: its phases by step.
  std::string describe() const;
};

inline constexpr EnumNames<LrSchedule::Decay, 4> kDecayNames{
    "schedule.decay",
    {{{LrSchedule::Decay::cosine, "cosine"},
      {LrSchedule::Decay::linear, "linear"},
      {LrSchedule::Decay::one_minus_sqrt, "1-sqrt"},
      {LrSchedule::Decay::constant, "constant"}}}};

}  // namespace trainer::nn
