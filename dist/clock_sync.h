// Every rank's clock against rank 0's, for traces whose ranks share one time axis.
#pragma once

#include <cstdint>
#include <functional>

#include "dist/communicator.h"
#include "runtime/trace.h"

namespace trainer::dist {

// Note [Trace clocks]
// A rank's steady clock (trace::now_ns) differs from rank 0's by an unknown offset d (rank
// 0's reading = this rank's + d). In each of some rounds every rank reads its clock (a), joins
// an all-gather, and reads it again (b). The gather cannot end on a rank before rank 0 has
// joined it, nor on rank 0 before the rank has, so rank 0's a precedes this rank's b and this
// rank's a precedes rank 0's b: a0 - b < d < b0 - a. Each round bounds d; their intersection
// is the estimate's interval, and its half-width a proven bound on the error, not a
// statistical one (tens of microseconds on one node: the gather's round trip). Ranks on one
// machine share the steady clock, so their true offset is 0 and lies in the interval. Clocks
// of two machines also drift apart (a few microseconds a second), so a trace aligns them as
// its recording starts and again as it ends, and moves each event by the offset interpolated
// between the two (trace::Alignment): the bound is proven at those two times, and between
// them holds as far as the drift is steady over the traced steps.
struct ClockOffset {
  int64_t offset_ns = 0;  // d, the interval's middle
  int64_t error_ns = 0;   // its half-width: |d - offset_ns| <= error_ns
  int64_t at_ns = 0;      // this rank's clock when the last round ended
  int64_t epoch_ns = 0;   // rank 0's clock in the last round, the same on every rank
};

// A collective over `comm`: this rank's offset to rank 0's clock (0 on rank 0) after `rounds`
// rounds of two all-gathers each (one process: none, and the epoch is now). `clock` is the
// clock read (a test's may run ahead of another rank's).
ClockOffset align_clocks(Communicator& comm, int rounds = 16,
                         const std::function<int64_t()>& clock = trace::now_ns);

}  // namespace trainer::dist
