// Who reached which collective, and who still answers (Note [Timeouts and missing ranks]): the
// MPI communicator's small messages beside its collectives, on a communicator of their own.
// Used on the communication engine's thread only.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace trainer::dist {

class MpiArrivals {
 public:
  // Over `comm` (reserved for these messages) of `size` ranks, as rank `rank`.
  MpiArrivals(MPI_Comm comm, int rank, int size);
  MpiArrivals(const MpiArrivals&) = delete;
  MpiArrivals& operator=(const MpiArrivals&) = delete;

  // Posts the receives, once.
  void start();
  // Tells the peers this rank reached collective #seq.
  void announce(int64_t seq);
  // Records the notices and answers that came in and answers pings; never blocks.
  void poll();
  // Asks every peer this rank hears from whether it is alive, once per collective #seq;
  // poll() collects the answers.
  void ping(int64_t seq);
  // Whether this rank hears from every peer (beyond kAllToAll ranks only rank 0 does).
  bool hears_all() const { return !sources_.empty() || size_ == 1; }
  // The peers whose latest notice is older than #seq.
  std::vector<int> missing(int64_t seq) const;
  // The peers that have not answered the latest ping.
  std::vector<int> silent() const;
  // Cancels the receives and lets pending sends drain (up to a second), before the
  // communicator is freed.
  void shutdown();

  static constexpr int kAllToAll = 64;  // ranks up to which every rank tells every rank

 private:
  struct PendingSend {
    int64_t value = 0;
    std::vector<MPI_Request> reqs;
  };
  void send(int64_t value, const std::vector<int>& to, int tag);
  void drain_sends();

  MPI_Comm comm_;
  int rank_, size_;
  std::vector<int> targets_, sources_;  // whom this rank tells, whom it hears from
  bool started_ = false;
  std::vector<int64_t> arrived_, arrive_buf_;  // by peer: the latest notice, the receive's
  std::vector<MPI_Request> arrive_recv_;
  int64_t ping_round_ = 0, ping_in_ = 0, pinged_seq_ = -1;
  MPI_Request ping_recv_ = MPI_REQUEST_NULL;
  std::vector<int64_t> answered_, answer_buf_;  // by peer: the latest round it answered
  std::vector<MPI_Request> answer_recv_;
  std::deque<std::unique_ptr<PendingSend>> sends_;
};

}  // namespace trainer::dist
