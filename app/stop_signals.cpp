// Stop signals: a flag set by a handler on an alternate stack; see stop_signals.h.
#include "app/stop_signals.h"

#include <pthread.h>

#include <csignal>
#include <vector>

namespace trainer::app {

// Note [Stop signals]
// SIGINT, SIGTERM and SIGUSR1 ask the run to stop at the next step boundary (after a
// checkpoint). The handler only sets a flag, and it runs on an alternate stack of its own:
// with the kernel's signal frame pushed on the interrupted thread's stack, a stop signal to
// one rank of two corrupted that rank's memory in 9 of 22 trials on the machines this was
// built on (Linux 6.18, AVX-512 and AMX: a frame of several KiB below whatever the interrupted
// code was doing; a no-op handler did the same), and in 0 of 24 with the alternate stack
// (tests/app/rank_failure.sh). An alternate stack belongs to one thread, so the signals are
// blocked from the start of run_training, every thread started meanwhile (MPI's, the
// communication thread, OpenMP's pool, the loader's) inherits the block, and only the
// training thread takes them, once the training loop calls take_stop_signals.
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

// The stop signals' handler, run on an alternate stack of its own (Note [Stop signals]).
void install_stop_handler() {
  static std::vector<char> stack(size_t(1) << 16);  // beyond any XSAVE frame, AMX included
  stack_t ss{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&set, sig);
  return set;
}

}  // namespace

void block_stop_signals() {
  const sigset_t stops = stop_signals();
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
}

void take_stop_signals() {
  install_stop_handler();
  const sigset_t stops = stop_signals();
  pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
}

int stop_signal_received() {
  return g_stop_signal;
}

std::string signal_name(int sig) {
  switch (sig) {
    case 0:
      return "none";
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return std::to_string(sig);
  }
}

}  // namespace trainer::app
