#include "nn/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/error.h"

namespace trainer::nn {

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * float(step + 1) / float(warmup_steps);
  if (decay == Decay::constant) return max_lr;
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::clamp(double(step - warmup_steps) / double(span), 0.0, 1.0);
  const double shape =
      decay == Decay::cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
  return float(min_lr + (max_lr - min_lr) * shape);
}

}  // namespace trainer::nn
