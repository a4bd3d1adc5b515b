// Point-to-point transfers over MPI (pipeline parallelism: Note [Pipeline transfers]): posted
// on the communication thread, completed by polling there, each with a deadline, so that a
// transfer in flight never holds up the collectives queued behind it.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/work_state.h"

namespace trainer::dist {

class MpiPointToPoint {
 public:
  // `describe_peer(r)` names rank r of `comm` in messages ("rank 3 on node2").
  MpiPointToPoint(MPI_Comm comm, std::function<std::string(int)> describe_peer);
  // Cancels what is still in flight (the job is ending).
  ~MpiPointToPoint();
  MpiPointToPoint(const MpiPointToPoint&) = delete;
  MpiPointToPoint& operator=(const MpiPointToPoint&) = delete;

  // On the communication thread: starts sending (or receiving) bytes [0, bytes) of `data` to
  // (from) `peer` with `tag`; `state` completes when they have left (arrived), or fails once
  // `timeout_s` has passed.
  void post(bool send, void* data, int64_t bytes, int peer, int tag, double timeout_s,
            std::shared_ptr<WorkState> state);
  // On the communication thread: completes the transfers that are done and fails those past
  // their deadline. Returns how many are still in flight.
  size_t poll();

 private:
  using Clock = std::chrono::steady_clock;
  struct Transfer {
    MPI_Request req = MPI_REQUEST_NULL;
    std::shared_ptr<WorkState> state;
    Clock::time_point start, deadline;
    std::string name;           // "recv of 65536 bytes from rank 3 on node2 (tag 12)"
    const char* kind = "send";  // or "recv": its trace span's name
    uint64_t trace_id = 0;      // its span in a trace being recorded
  };
  uint64_t traced_ = 0;  // transfers posted, numbering their trace spans
  MPI_Comm comm_;
  std::function<std::string(int)> describe_peer_;
  std::vector<Transfer> inflight_;
};

}  // namespace trainer::dist
