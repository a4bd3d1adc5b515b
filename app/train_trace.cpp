// The training loop's traces (log.trace_steps): when to record, the ranks' clocks, each rank's
// file. Internal to app/ (TrainLoop's, train_loop.h).
//
// Note [Traces]
// log.trace_steps = "a-b": every rank records steps a to b (runtime/trace.h) and writes
// <run>/traces/rank-R.json, process R of a Chrome trace, its times on rank 0's clock (Note
// [Trace clocks]: aligned as the recording starts and again as it ends, at step boundaries
// every rank reaches, each event moved by the offset interpolated between the two; the bound
// on the error is in the file's otherData and the log), so the ranks' files concatenate into
// one timeline (scripts/merge_traces.py). A run resumed inside the range records from its
// first step; one that stops early (a signal, the end of the data) writes what it recorded;
// one that ends with an error writes none. Its threads: "compute" (each step, its phases and
// each op with its family as the profile's scopes name them), "communication" (each
// collective, and under MPI each point-to-point transfer from its posting to its completion,
// an async span of the process), "loader" (each batch made) and "checkpoint writer"
// (checkpoint.async's writes). A step's span is the very interval its step_ms measures; its
// phases (data, batch agreement, passes, finish, agree, update) cover it but for a few lines
// of bookkeeping. Waits are spans of their own: "wait for gradient sums", "wait for
// collective" and "wait for tied embedding sum" (communication the step could not hide) and
// "wait for transfer" (a pipeline stage idle for its neighbour). On CUDA an op's span is the
// host queueing its kernels, not the kernels' run.
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/train_loop.h"
#include "runtime/log.h"
#include "runtime/trace.h"

namespace trainer::app {

namespace fs = std::filesystem;

// At the run's start, where it will trace: names this thread, and rank 0 removes an earlier
// launch's files (a run on more ranks would leave some the merge would take).
void TrainLoop::prepare_traces() {
  trace::name_thread("compute");
  if (!leader_) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(rc_.run_dir / "traces", ec))
    if (e.path().extension() == ".json") fs::remove(e.path(), ec);
}

// A collective at the boundary before step state_.step + 1: aligns the clocks and records.
void TrainLoop::begin_trace() {
  trace_clock_begin_ = dist::align_clocks(comm_);
  traced_from_ = state_.step + 1;
  trace::start();
}

// A collective: ends the recording (at trace_last, or at an agreed early stop), aligns the
// clocks again and writes this rank's file; a trace that cannot be written is said, and
// training goes on.
void TrainLoop::write_trace() {
  trace::stop();
  const dist::ClockOffset& b = trace_clock_begin_;
  const dist::ClockOffset e = dist::align_clocks(comm_);
  const int64_t error = std::max(b.error_ns, e.error_ns);
  const std::vector<int64_t> errors = comm_.all_gather(std::vector<int64_t>{error});
  const fs::path path = rc_.run_dir / "traces" / fmt::format("rank-{}.json", comm_.rank());
  const std::string role = grid_.shape().role(comm_.rank());
  const nlohmann::json other = {{"rank", comm_.rank()},
                                {"steps", {traced_from_, state_.step}},
                                {"clock_offset_us", double(b.offset_ns) / 1e3},
                                {"clock_offset_end_us", double(e.offset_ns) / 1e3},
                                {"clock_error_us", double(error) / 1e3}};
  try {
    fs::create_directories(path.parent_path());
    trace::write(path, comm_.rank(),
                 fmt::format("rank {}{} on {}", comm_.rank(), role.empty() ? "" : " (" + role + ")",
                             comm_.hosts()[size_t(comm_.rank())]),
                 {b.at_ns, b.offset_ns, e.at_ns, e.offset_ns}, b.epoch_ns, other.dump());
    if (leader_)
      log::info(
          "wrote the trace of {} to {}/rank-R.json: the ranks' clocks aligned to rank 0's within "
          "{:.1f} us",
          state_.step >= traced_from_ ? fmt::format("steps {}-{}", traced_from_, state_.step)
                                      : fmt::format("step {}, which did not finish", traced_from_),
          path.parent_path().string(),
          double(*std::max_element(errors.begin(), errors.end())) / 1e3);
  } catch (const std::exception& ex) {
    log::warn("the trace was not written: {}", ex.what());
  }
}

}  // namespace trainer::app
