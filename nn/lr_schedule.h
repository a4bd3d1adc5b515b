// Learning-rate schedules: linear warmup from 0, then cosine, linear or constant decay to a
// floor at the last step.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/enum_names.h"

namespace trainer::nn {

struct LrSchedule {
  enum class Decay { cosine, linear, constant };
  float max_lr = 3e-4f;
  float min_lr = 3e-5f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  Decay decay = Decay::cosine;

  // The learning rate for step `step` (0-based).
  float at(int64_t step) const;
};

inline constexpr EnumNames<LrSchedule::Decay, 3> kDecayNames{
    "schedule.decay",
    {{{LrSchedule::Decay::cosine, "cosine"},
      {LrSchedule::Decay::linear, "linear"},
      {LrSchedule::Decay::constant, "constant"}}}};

}  // namespace trainer::nn
