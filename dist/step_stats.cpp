// Per-rank step times and straggler detection; see step_stats.h.
#include "dist/step_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "dist/hosts.h"

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
  // The lower median: with half of the ranks slow (one node of two), the middle pair's mean
  // would sit between the fast and the slow, and hide them.
  rep.median_s = sorted[(n - 1) / 2];
  rep.lag = rep.median_s > 0 ? (rep.slowest_s - rep.median_s) / rep.median_s : 0;
  auto lags = [&](double s) {
    return comm.size() > 1 && rep.median_s > 0 &&
           (s - rep.median_s) / rep.median_s > policy.ratio && s - rep.median_s > policy.floor_s;
  };
  rep.lags = lags(rep.slowest_s);
  for (int r = 0; r < comm.size(); ++r)
    if (lags(own[size_t(r)])) rep.lagging.push_back(r);
  return rep;
}

std::optional<std::string> StragglerWatch::observe(const StragglerReport& rep) {
  if (!rep.lags) {
    subject_.clear();
    streak_ = 0;
    return std::nullopt;
  }
  // Whole nodes behind, when the job has more than one node (the median rank never lags, so
  // not every node can).
  std::vector<std::string> nodes = whole_hosts(rep.lagging, hosts_);
  if (std::set<std::string>(hosts_.begin(), hosts_.end()).size() < 2) nodes.clear();
  std::string subject;
  if (!nodes.empty()) {
    std::vector<int> ranks;
    for (int r : rep.lagging)
      if (std::find(nodes.begin(), nodes.end(), hosts_[size_t(r)]) != nodes.end())
        ranks.push_back(r);
    subject =
        fmt::format("slow node{}: {}", nodes.size() > 1 ? "s" : "", ranks_on_hosts(ranks, hosts_));
  } else {
    subject = fmt::format("straggler: {}", ranks_on_hosts({rep.slowest_rank}, hosts_));
  }
  streak_ = subject == subject_ ? streak_ + 1 : 1;
  subject_ = subject;
  if (streak_ % policy_.steps != 0) return std::nullopt;
  return fmt::format(
      "{} {} been behind for {} steps in a row; this step the slowest took {:.3f} s of its "
      "own work, {:.0f}% over the median {:.3f} s",
      subject_, nodes.size() > 1 ? "have" : "has", streak_, rep.slowest_s, rep.lag * 100,
      rep.median_s);
}

}  // namespace trainer::dist
