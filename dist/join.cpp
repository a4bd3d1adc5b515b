// Global token counts and Join decisions; see join.h.
#include "dist/join.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::dist {

StepCounts exchange_counts(Communicator& comm, bool has_data, int64_t loss_tokens,
                           int64_t micro_batches) {
  CHECK(loss_tokens >= 0, "negative loss token count {}", loss_tokens);
  // Gathered rather than summed so every rank also learns who is out (for Join's log).
  const std::vector<int64_t> all = comm.all_gather(std::vector<int64_t>{
      has_data ? 1 : 0, has_data ? loss_tokens : 0, has_data ? micro_batches : 0});
  StepCounts c;
  c.world_size = comm.size();
  for (int r = 0; r < comm.size(); ++r) {
    const bool has = all[size_t(3 * r)] != 0;
    c.global_tokens += all[size_t(3 * r + 1)];
    c.max_micro_batches = std::max(c.max_micro_batches, all[size_t(3 * r + 2)]);
    if (has)
      ++c.ranks_with_data;
    else
      c.ranks_without_data.push_back(r);
  }
  return c;
}

StepAction Join::decide(const StepCounts& counts, bool has_data, int64_t step) {
  if (counts.none_have_data()) return StepAction::stop;
  if (counts.all_have_data()) return StepAction::compute;
  if (first_out_rank_ < 0) {
    first_out_rank_ = counts.ranks_without_data.front();
    first_out_step_ = step;
    CHECK(mode_ != JoinMode::throw_error,
          "uneven inputs at step {}: rank(s) {} have no data left while {} of {} ranks still do "
          "(join: throw)",
          step, fmt::join(counts.ranks_without_data, ", "), counts.ranks_with_data,
          counts.world_size);
    log::info("rank(s) {} ran out of data first, at step {}; {}",
              fmt::join(counts.ranks_without_data, ", "), step,
              mode_ == JoinMode::enabled ? "they join with zero gradients until all are done"
                                         : "stopping every rank (join: false)");
  }
  if (mode_ == JoinMode::disabled) return StepAction::stop;
  return has_data ? StepAction::compute : StepAction::join;
}

}  // namespace trainer::dist
