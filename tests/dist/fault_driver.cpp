// A small DDP run that goes wrong on purpose, for check_fault.sh: `kill` (rank 1 dies by
// SIGKILL mid-run), `stall` (rank 1 stops by SIGSTOP mid-run) or `mismatch` (rank 1 starts
// with a different config). The other ranks must exit non-zero with a clear error within the
// communicator's timeout instead of hanging.
#include <csignal>
#include <cstring>

#include "dist/communicator.h"
#include "dist/consistency.h"
#include "dist/ddp.h"
#include "dist/join.h"
#include "dist_test_util.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::dist {
namespace {

// check_fault.sh expects "timed out after 3.0 s" and the job over within 20 s. A healthy wait
// is the start-up of ranks launched together (MPI_Init) or one step of a 2-block model of 32
// channels on 32 tokens (milliseconds): only the fault reaches 3 s.
constexpr double kTimeoutS = 3;

void run(const std::string& mode) {
  const LaunchInfo launch = discover_launch();
  log::configure(launch.rank, launch.world_size);
  std::unique_ptr<Communicator> comm = make_communicator(launch, {.timeout_s = kTimeoutS});
  const int R = comm->rank(), T = 16, B = 2;
  nn::Transformer model(testing::small_config(), testing::exec_for(B, T));
  model.init_weights(1);
  const bool odd = R == 1;
  check_consistency(
      *comm, {{"the resolved config",
               mode == "mismatch" && odd ? "optimizer:\n  lr: 0.2\n" : "optimizer:\n  lr: 0.1\n"}});
  broadcast_parameters(*comm, model.params());
  DDP ddp(*comm, model, {.bucket_mb = 0.02, .frozen = {}});
  for (int step = 0; step < 50; ++step) {
    if (odd && step == 3) {
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "stall") std::raise(SIGSTOP);
    }
    testing::Rows rows = testing::make_rows(step, R * B, B, T);
    const StepCounts counts = exchange_counts(*comm, true, rows.loss_tokens());
    model.zero_grads();
    model.forward(rows.view());
    model.backward(1.0f / float(counts.global_tokens));
    ddp.finish();
  }
  log::info("finished without a failure");
}

}  // namespace
}  // namespace trainer::dist

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: dist_fault_driver kill|stall|mismatch\n");
    return 2;
  }
  try {
    trainer::dist::run(argv[1]);
  } catch (const trainer::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
