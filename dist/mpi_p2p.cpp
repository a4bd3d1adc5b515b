#include "dist/mpi_p2p.h"

#include <climits>
#include <thread>

#include <fmt/format.h>

#include "runtime/error.h"
#include "runtime/trace.h"

namespace trainer::dist {

MpiPointToPoint::MpiPointToPoint(MPI_Comm comm, std::function<std::string(int)> describe_peer)
    : comm_(comm), describe_peer_(std::move(describe_peer)) {}

namespace {

// Cancels a transfer and gives MPI a moment (at most 0.1 s) to confirm; a request it does not
// release by then is freed unconfirmed (its buffer's owner is told it failed, and the job is
// ending).
void abandon(MPI_Request& req) {
  if (req == MPI_REQUEST_NULL) return;
  MPI_Cancel(&req);
  for (int i = 0; i < 100; ++i) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MPI_Request_free(&req);
}

}  // namespace

MpiPointToPoint::~MpiPointToPoint() {
  for (Transfer& t : inflight_) {
    abandon(t.req);
    t.state->complete(0, t.name + " cancelled: the communicator is closing");
  }
}

void MpiPointToPoint::post(bool send, void* data, int64_t bytes, int peer, int tag,
                           double timeout_s, std::shared_ptr<WorkState> state) {
  Transfer t;
  t.state = std::move(state);
  t.start = Clock::now();
  t.deadline = t.start + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(timeout_s));
  t.name = fmt::format("{} of {} bytes {} {} (tag {})", send ? "send" : "recv", bytes,
                       send ? "to" : "from", describe_peer_(peer), tag);
  if (bytes > INT_MAX) {
    t.state->complete(0, t.name + ": more than MPI's 2 GiB in one message");
    return;
  }
  const int rc = send ? MPI_Isend(data, int(bytes), MPI_BYTE, peer, tag, comm_, &t.req)
                      : MPI_Irecv(data, int(bytes), MPI_BYTE, peer, tag, comm_, &t.req);
  if (rc != MPI_SUCCESS) {
    t.state->complete(0, fmt::format("{} could not start (MPI error {})", t.name, rc));
    return;
  }
  t.kind = send ? "send" : "recv";
  t.trace_id = ++traced_;
  trace::begin_async(t.kind, "transfer", t.trace_id, "bytes", bytes);
  inflight_.push_back(std::move(t));
}

size_t MpiPointToPoint::poll() {
  const Clock::time_point now = Clock::now();
  std::erase_if(inflight_, [&](Transfer& t) {
    int flag = 0;
    const int rc = MPI_Test(&t.req, &flag, MPI_STATUS_IGNORE);
    const double busy = std::chrono::duration<double>(now - t.start).count();
    if (rc != MPI_SUCCESS) {
      abandon(t.req);
      t.state->complete(busy, fmt::format("{} failed (MPI error {})", t.name, rc));
      return true;
    }
    if (flag) {
      trace::end_async(t.kind, "transfer", t.trace_id);
      t.state->complete(busy);
      return true;
    }
    if (now > t.deadline) {
      abandon(t.req);
      t.state->complete(busy, fmt::format("{} timed out after {:.1f} s: that rank does not "
                                          "answer or stopped before it (dist.timeout_s)",
                                          t.name, busy));
      return true;
    }
    return false;
  });
  return inflight_.size();
}

}  // namespace trainer::dist
