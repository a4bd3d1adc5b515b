// Stop signals (SIGINT, SIGTERM, SIGUSR1): the training thread alone takes them and only
// raises a flag, which the ranks agree on at the next step (Note [Stop signals] in
// stop_signals.cpp).
#pragma once

#include <string>

namespace trainer::app {

// Blocks the stop signals in the calling thread, and so in every thread it starts from now on.
// Called first thing in run_training, before MPI, OpenMP or the loader start threads.
void block_stop_signals();

// Installs the handler (on an alternate stack of the calling thread) and unblocks the stop
// signals in this thread only: from now on it alone takes them.
void take_stop_signals();

// The stop signal received so far, or 0.
int stop_signal_received();

// "SIGINT", "SIGTERM" or "SIGUSR1" for a stop signal; "none" for 0 (it reached another rank).
std::string signal_name(int sig);

}  // namespace trainer::app
