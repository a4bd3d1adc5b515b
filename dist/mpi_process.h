// MPI as a process sees it: starting it with a deadline for the other ranks (Note [Ranks that
// never join]) and ending the whole job when this rank cannot finalize cleanly (Note
// [Aborting]). The MPI communicator is the only caller.
#pragma once

#include <string>

#include "dist/launch.h"
#include "dist/network.h"

namespace trainer::dist {

// MPI_Init_thread at MPI_THREAD_SERIALIZED with errors returned, not fatal, over the network
// interface dist.interface = `interface` chooses (Note [Choosing the network]), checked between
// nodes before it returns; ends the process with one line if the other ranks of `launch` have
// not all arrived within timeout_s. Throws when MPI is already initialised or cannot give that
// thread level, and when the choice is wrong. Returns the choice.
NetworkChoice mpi_init(const LaunchInfo& launch, double timeout_s, const std::string& interface);

// Marks the job for MPI_Abort at exit (with set_abort_exit_code's code), after main has
// printed its error line, instead of an MPI_Finalize that waits for peers that may be dead.
void abort_job_at_exit();

// MPI's text for an error code.
std::string mpi_error_string(int code);

}  // namespace trainer::dist
