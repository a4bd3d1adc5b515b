#include "dist/mpi_process.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "dist/communicator.h"
#include "runtime/error.h"

namespace trainer::dist {

namespace {

// Note [Aborting]
// A rank that saw a collective fail (or is unwinding from any error) must not call
// MPI_Finalize, which waits for peers that may be dead or stuck. Its communicator's destructor
// instead marks the job for abort, and an exit handler calls MPI_Abort once main has printed
// its error line, so every rank of the job ends non-zero instead of waiting out its timeout.
std::atomic<bool> g_abort_at_exit{false};
std::atomic<int> g_abort_code{1};

void abort_at_exit() {
  if (!g_abort_at_exit) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, g_abort_code.load());
}

// Note [Ranks that never join]
// MPI_Init returns only once every rank of the job has started and called it, and it has no
// deadline of its own: a rank that never starts (a node that failed to launch it, a process
// stuck before main) would leave the others waiting for ever. A watchdog ends the process with
// one line if MPI_Init has not returned within dist.timeout_s.
class JoinWatchdog {
 public:
  JoinWatchdog(const LaunchInfo& launch, double timeout_s) {
    thread_ = std::thread([this, launch, timeout_s] {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done_; }))
        return;
      std::fprintf(stderr,
                   "[rank %d] error: MPI_Init has waited %.1f s (dist.timeout_s) for the other "
                   "%d rank(s) of the job: at least one never started or never reached it; check "
                   "the launcher's output for every rank and node\n",
                   launch.rank, timeout_s, launch.world_size - 1);
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
  ~JoinWatchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  JoinWatchdog(const JoinWatchdog&) = delete;
  JoinWatchdog& operator=(const JoinWatchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

NetworkChoice mpi_init(const LaunchInfo& launch, double timeout_s, const std::string& interface) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  CHECK(!initialized, "MPI is already initialised: create one MPI communicator per process");
  const NetworkChoice network = choose_network(interface, launch, network_env());
  apply_network(network);
  int provided = 0;
  int rc = 0;
  {
    const JoinWatchdog watchdog(launch, timeout_s);
    rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed: {}", mpi_error_string(rc));
  CHECK(provided >= MPI_THREAD_SERIALIZED,
        "MPI provides thread level {} but the communication thread needs "
        "MPI_THREAD_SERIALIZED",
        provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(abort_at_exit);
  try {
    check_network(network, launch, timeout_s);
  } catch (...) {
    abort_job_at_exit();  // no MPI_Finalize: it would wait on the network just found wanting
    throw;
  }
  return network;
}

void abort_job_at_exit() {
  g_abort_at_exit = true;
}

void set_abort_exit_code(int code) {
  g_abort_code = code;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

}  // namespace trainer::dist
