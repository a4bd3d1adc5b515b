// See lr_schedule.h.
//
// Note [WSD]
// Warmup-stable-decay (Hu et al. 2024, MiniCPM; Hägele et al. 2024): the rate holds at its peak
// after warmup and decays only over the last decay_steps. Up to the decay's start it equals a
// constant schedule's, step for step, so a cooldown can branch off any checkpoint of a
// constant-rate run: resume from it with train.steps = its step + decay_steps (docs/recipes.md,
// "Warmup-stable-decay and cooldown branches"). With progress p in [0, 1) over the decay,
// the rate is min + (max - min) * shape(p): cosine (1 + cos(pi p)) / 2, linear 1 - p, 1-sqrt
// 1 - sqrt(p).
#include "nn/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "runtime/error.h"

namespace trainer::nn {

int64_t LrSchedule::decay_start() const {
  if (decay == Decay::constant) return total_steps;
  return decay_steps > 0 ? total_steps - decay_steps : warmup_steps;
}

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * float(step + 1) / float(warmup_steps);
  const int64_t start = decay_start();
  if (step < start) return max_lr;
  const int64_t span = std::max<int64_t>(1, total_steps - start);
  const double p = std::clamp(double(step - start) / double(span), 0.0, 1.0);
  double shape = 1.0 - p;
  if (decay == Decay::cosine) shape = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  if (decay == Decay::one_minus_sqrt) shape = 1.0 - std::sqrt(p);
  return float(min_lr + (max_lr - min_lr) * shape);
}

void LrSchedule::validate() const {
  if (min_lr > max_lr)
    throw UsageError(
        fmt::format("optimizer.min_lr = {} exceeds optimizer.lr = {}", min_lr, max_lr));
  if (decay_steps == 0) return;
  if (decay == Decay::constant)
    throw UsageError(fmt::format(
        "schedule.decay_steps = {} with schedule.decay = constant: choose the decay's shape "
        "(cosine, linear or 1-sqrt)",
        decay_steps));
  if (warmup_steps + decay_steps > total_steps)
    throw UsageError(fmt::format(
        "schedule.warmup_steps = {} and schedule.decay_steps = {} do not fit in train.steps = {}",
        warmup_steps, decay_steps, total_steps));
}

std::string LrSchedule::describe() const {
  std::string out =
      warmup_steps > 0 ? fmt::format("warmup to {:g} over steps 1-{}, ", max_lr, warmup_steps) : "";
  const int64_t start = decay_start();
  if (start > warmup_steps)
    out += fmt::format("{:g} over steps {}-{}", max_lr, warmup_steps + 1, start);
  if (start < total_steps)
    out += fmt::format("{}{} decay to {:g} over steps {}-{}", start > warmup_steps ? ", " : "",
                       kDecayNames.name(decay), min_lr, start + 1, total_steps);
  return out;
}

}  // namespace trainer::nn
