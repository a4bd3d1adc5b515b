// Aligning the ranks' clocks; see clock_sync.h.
#include "dist/clock_sync.h"

#include <algorithm>
#include <limits>

#include "runtime/error.h"
#include "runtime/trace.h"

namespace trainer::dist {

ClockOffset align_clocks(Communicator& comm, int rounds, const std::function<int64_t()>& clock) {
  if (comm.size() == 1) {
    const int64_t now = clock();
    return {0, 0, now, now};
  }
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  int64_t epoch = 0, at = 0;
  for (int k = 0; k < rounds; ++k) {
    const int64_t a = clock();
    comm.all_gather(std::vector<int64_t>{a});  // the event both readings bracket
    const int64_t b = clock();
    at = b;
    const std::vector<int64_t> all = comm.all_gather(std::vector<int64_t>{a, b});
    const int64_t a0 = all[0], b0 = all[1];
    epoch = a0;
    lo = std::max(lo, a0 - b);
    hi = std::min(hi, b0 - a);
  }
  TRAINER_ASSERT(lo <= hi, "clock alignment: an empty interval [{}, {}]", lo, hi);
  if (comm.rank() == 0) return {0, 0, at, epoch};  // its own clock
  return {lo + (hi - lo) / 2, (hi - lo + 1) / 2, at, epoch};
}

}  // namespace trainer::dist
