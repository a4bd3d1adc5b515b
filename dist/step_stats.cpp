// Per-rank step times and straggler detection; see step_stats.h.
#include "dist/step_stats.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainer::dist {

StragglerReport gather_step_times(Communicator& comm, const StepTimes& mine,
                                  const StragglerPolicy& policy) {
  constexpr int kFields = 6;
  const double fields[kFields] = {mine.data_wait_s, mine.forward_s,   mine.backward_s,
                                  mine.comm_wait_s, mine.optimizer_s, mine.comm_busy_s};
  std::vector<double> all(size_t(kFields * comm.size()));
  comm.all_gather_async(fields, all.data(), kFields, DType::f64).wait();
  StragglerReport rep;
  std::vector<double> own;
  for (int r = 0; r < comm.size(); ++r) {
    const double* f = &all[size_t(r * kFields)];
    rep.ranks.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
    own.push_back(rep.ranks.back().own_work_s());
  }
  rep.slowest_rank = int(std::max_element(own.begin(), own.end()) - own.begin());
  rep.slowest_s = own[size_t(rep.slowest_rank)];
  std::vector<double> sorted = own;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  rep.median_s = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  rep.lag = rep.median_s > 0 ? (rep.slowest_s - rep.median_s) / rep.median_s : 0;
  rep.lags =
      comm.size() > 1 && rep.lag > policy.ratio && rep.slowest_s - rep.median_s > policy.floor_s;
  return rep;
}

std::optional<std::string> StragglerWatch::observe(const StragglerReport& rep) {
  if (!rep.lags) {
    rank_ = -1;
    streak_ = 0;
    return std::nullopt;
  }
  streak_ = rep.slowest_rank == rank_ ? streak_ + 1 : 1;
  rank_ = rep.slowest_rank;
  if (streak_ % policy_.steps != 0) return std::nullopt;
  return fmt::format(
      "straggler: rank {} has been behind for {} steps in a row; this step it took {:.3f} s of "
      "its own work, {:.0f}% over the median {:.3f} s",
      rank_, streak_, rep.slowest_s, rep.lag * 100, rep.median_s);
}

}  // namespace trainer::dist
