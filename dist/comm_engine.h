// What every asynchronous communicator shares (Note [Communication engine]): the queue of
// operations in issue order, the thread that runs them, their Work handles, the statistics,
// and what a failure does to the operations after it. A communicator (MPI, NCCL) supplies only
// how one operation runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/work_state.h"

namespace trainer::dist {

// Thrown by a CommJob's `run` when its operation failed or timed out; `message` is the line
// every waiter gets.
struct CommFailure {
  std::string message;
};

// One collective as the engine sees it.
struct CommJob {
  const char* kind = "";  // all_reduce, reduce_scatter, all_gather, broadcast, barrier, split,
                          // send, recv, or transfers (an NCCL group of sends and receives)
  double bytes = 0;       // its buffer's bytes, as CommStats::add counts them
  std::string detail;     // what follows "<kind> #<seq>" in messages: " (4096 x fp32)"
  // On the caller's thread, in issue order, unless the engine has failed: queues the work
  // where the communicator runs it on a device stream (NCCL). May be empty.
  std::function<void()> issue;
  // On the engine's thread: runs the operation, or waits for the issued one, and returns the
  // seconds it was busy; throws CommFailure. `name` is "<kind> #<seq><detail>".
  std::function<double(const std::string& name, int64_t seq)> run;
  int world = 0;    // the ranks it spans, for the statistics (0: the engine's)
  int account = 0;  // whose statistics it adds to (add_account; 0: the engine's creator's)
  // Where `issue` queued it on a device stream: makes the model's stream wait for it
  // (Work::order_stream_after). May be empty.
  std::function<void()> order_stream;
};

// Note [Communication engine]
// Operations complete in the order they were issued, each numbered from 0 for messages (the
// MPI communicator's arrival notices count each communicator's own collectives instead, a
// number its ranks share). An MPI point-to-point transfer's job only posts it; its own Work
// completes when the data has moved, outside this order (dist/mpi_p2p.h); an NCCL group of
// transfers is one operation like a collective. The
// first failure breaks the engine: its waiters get its message, and every later operation
// completes at once with "not run: the communicator failed earlier: <that message>" instead of
// running (its peers may be dead, and a collective with them would only wait out its timeout).
// The engine logs nothing: the first of these to reach a waiter propagates to main, which
// prints it, so a failure is one line per rank.
class CommEngine {
 public:
  // `world`: the ranks, for the statistics. `thread_start` runs first on the engine's thread
  // (NCCL binds its device there).
  explicit CommEngine(int world, std::function<void()> thread_start = {});
  // Runs what is queued, then stops the thread (stop()).
  ~CommEngine();
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  Work submit(CommJob job);
  // Runs what is queued, then joins the thread; nothing may be submitted after.
  void stop();
  // Whether an operation has failed.
  bool broken() const;
  // Marks the engine broken by `message` (as a failed operation does) and runs `cleanup`:
  // called by a running operation before it throws its CommFailure, it lets the communicator
  // tear down what issuing uses (NCCL's abort). No issue starts once it is called; one in
  // progress is waited for, up to kIssueGraceMs, and past that the cleanup runs beside it,
  // which is what unblocks an issue stuck behind the failure (NCCL's abort is made for that).
  void fail(const std::string& message, const std::function<void()>& cleanup);
  static constexpr int kIssueGraceMs = 1000;
  // A new account for a communicator sharing this engine, so that each keeps its own totals.
  int add_account();
  // The totals of the operations charged to `account`.
  CommStats stats(int account = 0) const;

  // A task the engine's thread runs every kIdlePeriod while no operation is queued (the MPI
  // communicator answers its peers' pings there), and whenever a running operation calls
  // run_idle(). Returns its id for remove_idle().
  int add_idle(std::function<void()> task);
  // Removes it; once this returns, it is not running and never runs again.
  void remove_idle(int id);
  // Runs every idle task now (on the engine's thread, from within an operation).
  void run_idle();
  static constexpr std::chrono::milliseconds kIdlePeriod{10};
  // While a caller holds transfers in flight that its idle task completes (point to point),
  // the idle tasks run every kHurriedPeriod instead: +1 when it starts holding, -1 when done.
  void hurry(int delta) { hurried_ += delta; }
  static constexpr std::chrono::microseconds kHurriedPeriod{100};

 private:
  struct Queued {
    CommJob job;
    std::string name;
    int64_t seq = 0;
    std::shared_ptr<WorkState> state;
  };
  void loop();

  const int world_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  int64_t next_seq_ = 0;
  bool stop_ = false;
  bool broken_ = false;
  std::atomic<bool> failing_{false};  // fail() has begun: submit issues nothing more
  std::string broken_message_;
  std::vector<CommStats> accounts_{1};
  std::mutex idle_mu_;  // held while the idle tasks run, and to change them
  std::vector<std::pair<int, std::function<void()>>> idle_;
  int next_idle_ = 0;
  std::atomic<bool> has_idle_{false};
  std::atomic<int> hurried_{0};
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace trainer::dist
