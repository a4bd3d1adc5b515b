// See spike_guard.h.
//
// Note [Spike guard]
// A poisoned batch, or an update that overshoots, shows as a loss or gradient norm far above
// the run's recent values. The guard keeps the last `window` accepted steps' loss and gradient
// norm (the agreed values every rank already has after the step's reduction: the mean loss of
// the global batch and the norm before clipping), and calls a step a spike when either watched
// value exceeds its window's mean by more than `threshold` population standard deviations. It
// judges nothing until its window is full, and skipped steps never join it. Every rank computes
// the same statistics from the same doubles in the same order, so every rank decides alike
// without another collective. A spike under `skip` changes nothing (as a non-finite step under
// train.on_nonfinite=skip, with whose count it shares train.max_consecutive_skips and
// train.max_skips); under `stop` the run saves the state before the step (weights, optimizer,
// data position, these windows) and ends with exit 1, so a resume replays the same batch. The
// windows travel in each checkpoint's trainer state: a resumed run judges as the uninterrupted
// run would. A step where a schedule changes the batch (train.grad_accum_schedule,
// train.seq_len_schedule) or the data (data.sources_schedule) empties them: the loss may
// settle at another level there, which the old window would call a spike again and again.
#include "app/spike_guard.h"

#include <cmath>

#include <fmt/format.h>

#include "runtime/error.h"

namespace trainer::app {

std::string SpikeGuard::check(const char* name, const std::deque<double>& window, double x) const {
  if (int64_t(window.size()) < policy_.window) return {};
  double mean = 0;
  for (double v : window) mean += v;
  mean /= double(window.size());
  double var = 0;
  for (double v : window) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / double(window.size()));
  if (!(x > mean + policy_.threshold * sd)) return {};
  return fmt::format(
      "the {} {:.4g} is {} standard deviations above the mean {:.4g} of the last {} steps", name, x,
      sd > 0 ? fmt::format("{:.1f}", (x - mean) / sd) : std::string("infinitely many"), mean,
      window.size());
}

std::string SpikeGuard::spike(double loss, double grad_norm) const {
  if (policy_.action == SpikeAction::off) return {};
  if (policy_.metric != SpikeMetric::grad_norm)
    if (std::string s = check("loss", losses_, loss); !s.empty()) return s;
  if (policy_.metric != SpikeMetric::loss) return check("gradient norm", norms_, grad_norm);
  return {};
}

void SpikeGuard::push(std::deque<double>& window, double x) const {
  window.push_back(x);
  while (int64_t(window.size()) > policy_.window) window.pop_front();
}

void SpikeGuard::accept(double loss, double grad_norm) {
  if (policy_.action == SpikeAction::off) return;
  push(losses_, loss);
  push(norms_, grad_norm);
}

void SpikeGuard::restart() {
  losses_.clear();
  norms_.clear();
}

nlohmann::json SpikeGuard::state() const {
  return {{"losses", losses_}, {"grad_norms", norms_}};
}

void SpikeGuard::restore(const nlohmann::json& state) {
  losses_.clear();
  norms_.clear();
  if (state.is_null()) return;  // saved without the guard: its window fills from here
  for (double v : state.at("losses").get<std::vector<double>>()) push(losses_, v);
  for (double v : state.at("grad_norms").get<std::vector<double>>()) push(norms_, v);
}

}  // namespace trainer::app
