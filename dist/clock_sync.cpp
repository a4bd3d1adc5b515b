// Aligning the ranks' clocks; see clock_sync.h.
#include "dist/clock_sync.h"

#include <algorithm>
#include <limits>

#include "runtime/trace.h"

namespace trainer::dist {

ClockOffset align_clocks(Communicator& comm, int rounds) {
  if (comm.size() == 1) return {0, 0, trace::now_ns()};
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  int64_t epoch = 0;
  for (int k = 0; k < rounds; ++k) {
    const int64_t a = trace::now_ns();
    comm.all_gather(std::vector<int64_t>{a});  // the event both readings bracket
    const int64_t b = trace::now_ns();
    const std::vector<int64_t> all = comm.all_gather(std::vector<int64_t>{a, b});
    const int64_t a0 = all[0], b0 = all[1];
    epoch = a0;
    lo = std::max(lo, a0 - b);
    hi = std::min(hi, b0 - a);
  }
  if (comm.rank() == 0) return {0, 0, epoch};  // its own clock
  return {lo + (hi - lo) / 2, (hi - lo + 1) / 2, epoch};
}

}  // namespace trainer::dist
