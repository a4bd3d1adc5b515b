// The one interface every collective goes through: sum all-reduce, reduce-scatter,
// all-gather, broadcast and barrier over buffers of any DType (bf16 sums add pairs in fp32 and
// round once), each with an async variant returning a Work handle. Implementations: MPI (one
// communication thread owns every MPI call; every operation has a deadline) and a single process
// (copies and no-ops). Every rank must issue the same collectives in the same order; each one gets
// a sequence number used in errors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dist/launch.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace trainer::dist {

// The shared state of one queued operation; implementations complete it.
struct WorkState;

// A collective or transfer that failed or timed out: its message names the operation, its
// sequence number and the peers it waited for, each with its host and its role in the grid.
class CommError : public Error {
 public:
  using Error::Error;
};

// A handle to an operation in flight. wait() blocks until it is done and throws CommError if it
// failed.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
  void wait();
  bool done() const;
  bool valid() const { return state_ != nullptr; }
  // What the caller queues on the model's stream (CommOptions::cuda_stream) from now on runs
  // after this operation: where it runs on a device stream (NCCL) that stream waits for it and
  // the host goes on; otherwise this waits for it (wait()). Called on the issuing thread.
  void order_stream_after();
  // Seconds the operation spent in the network (from its start to its completion), once done.
  double busy_seconds() const;

 private:
  std::shared_ptr<WorkState> state_;
};

// How a sum is associated. `any`: whatever the implementation finds fastest (MPI's or NCCL's
// own algorithm; the order may depend on the world size and the message size). `fixed_tree`:
// a balanced binary tree over the ranks, pairing rank r with r ^ 1 first, then pairs of pairs
// (Note [Fixed-tree reductions] in dist/fixed_tree.h); each element's sum is then a
// function of the ranks' values alone, and, for a world of 2^k ranks, the same tree a single
// process builds over the same inputs (dist.deterministic). Needs a power-of-two world.
enum class ReduceOrder : uint8_t { any, fixed_tree };

// Totals of the collectives a communicator completed since its creation.
struct CommStats {
  double busy_s = 0;     // seconds in the network (from each one's start to its completion)
  double bytes = 0;      // their buffers: a reduce-scatter's input, an all-gather's output
  double bus_bytes = 0;  // what each rank's link carried, as nccl-tests counts it: x 2(n-1)/n
                         // for an all-reduce, x (n-1)/n for a reduce-scatter or all-gather
  // Counts one collective: `kind` all_reduce, reduce_scatter, all_gather, broadcast or barrier,
  // over a buffer of `bytes` on `world` ranks.
  void add(std::string_view kind, double bytes, int world, double busy_s);
  // Bus bandwidth in GB/s since `before` (0 when nothing ran).
  double bus_gbps_since(const CommStats& before) const;
};

// One side of a point-to-point transfer: data[0, count) to rank `peer`, or from it into data.
struct PeerTransfer {
  bool send = false;  // else a receive
  void* data = nullptr;
  int64_t count = 0;
  DType type = DType::f32;
  int peer = 0;
  int tag = 0;  // 0 <= tag < 32768; MPI matches transfers by it, NCCL names it in messages
};

struct CommOptions {
  double timeout_s = 300;  // any collective not complete after this fails on every waiting rank
  // MPI: the network interface between nodes, dist.interface (Note [Choosing the network]).
  std::string interface = "auto";
  // NCCL: the CUDA stream the model's work is queued on (null: the legacy default stream).
  // Each collective's stream waits for what was queued there before it was issued.
  void* cuda_stream = nullptr;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "nccl" or "single": for logs and metrics, not for decisions (ask a property).
  virtual std::string backend() const = 0;
  // Whether collectives run even on one rank (NCCL: a one-GPU run measures the collectives and
  // their overlap as a multi-GPU run has them); false: on one rank there is nothing to do.
  virtual bool runs_collectives_alone() const { return false; }

  // data[0, count) = sum over ranks, in place.
  virtual Work all_reduce_async(void* data, int64_t count, DType type,
                                ReduceOrder order = ReduceOrder::any) = 0;
  // recv[0, count) = the sum over ranks of send[rank*count, (rank+1)*count).
  virtual Work reduce_scatter_async(const void* send, void* recv, int64_t count, DType type,
                                    ReduceOrder order = ReduceOrder::any) = 0;
  // recv[r*count, (r+1)*count) = rank r's send[0, count).
  virtual Work all_gather_async(const void* send, void* recv, int64_t count, DType type) = 0;
  // data[0, bytes) = root's data[0, bytes).
  virtual Work broadcast_async(void* data, int64_t bytes, int root) = 0;
  // Completes when every rank has arrived; timeout_s > 0 replaces the communicator's
  // timeout for this one (a checkpoint save waits for the slowest writer).
  virtual Work barrier_async(double timeout_s = 0) = 0;

  // Blocking forms.
  void all_reduce(float* data, int64_t count) { all_reduce_async(data, count, DType::f32).wait(); }
  void all_reduce(std::vector<double>& v) {
    all_reduce_async(v.data(), int64_t(v.size()), DType::f64).wait();
  }
  void all_reduce(std::vector<int64_t>& v) {
    all_reduce_async(v.data(), int64_t(v.size()), DType::i64).wait();
  }
  void reduce_scatter(const float* send, float* recv, int64_t count) {
    reduce_scatter_async(send, recv, count, DType::f32).wait();
  }
  void all_gather(const float* send, float* recv, int64_t count) {
    all_gather_async(send, recv, count, DType::f32).wait();
  }
  // One value per rank, gathered to every rank.
  std::vector<int64_t> all_gather(const std::vector<int64_t>& mine);
  void broadcast(void* data, int64_t bytes, int root = 0) {
    broadcast_async(data, bytes, root).wait();
  }
  void barrier(double timeout_s = 0) { barrier_async(timeout_s).wait(); }

  // Point to point (Note [Pipeline transfers] in dist/pipeline.h): posts `transfers` as one
  // group and returns a Work for each, complete when its data has left (send) or arrived
  // (receive); one that is not after the communicator's timeout fails, naming the peer. Only
  // the ranks of a transfer take part. MPI matches a transfer by its tag and posts each alone,
  // so one in flight never holds up what is issued after it; NCCL matches them in the order
  // two ranks post them and runs the group's transfers together, in order with the
  // communicator's collectives (Note [Pipeline transfer groups] in dist/pipeline_schedule.h).
  // The single-process communicator throws a trainer::Error.
  virtual std::vector<Work> transfer_async(const std::vector<PeerTransfer>& transfers);

  // What the collectives moved and how long they took, since creation (metrics, overlap).
  virtual CommStats stats() const = 0;

  // The host each rank runs on, by rank (its hostname).
  virtual const std::vector<std::string>& hosts() const = 0;
  // What each world rank is to the model (GridShape::role), for the messages that name ranks:
  // "rank 1 (pipeline stage 1) on node2 does not answer". Set on the world by the grid, with no
  // operation in flight, before it splits: the groups split from it after know them too.
  virtual void name_ranks(std::vector<std::string> roles) { (void)roles; }
  // How the ranks reach each other between nodes, for the start-up log: "eth0 (10.0.0.5, the
  // address node1 resolves to)", or why no interface was chosen.
  virtual std::string network() const = 0;

  // A collective: a communicator over the ranks that pass the same `color`, numbered by `key`
  // (MPI_Comm_split's rule). It may share this one's queue (MPI: one thread makes every MPI
  // call), so every rank issues the two's collectives in one order; destroy it before this one.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// A communicator for one process: reductions are no-ops, gathers are copies.
std::unique_ptr<Communicator> make_single_process_communicator();

// Initialises MPI (once per process) and returns a communicator over MPI_COMM_WORLD; checks
// that MPI agrees with `launch` on rank and world size. Destroying it finalises MPI; when a
// collective failed or an exception is unwinding, it skips MPI_Finalize and the job is aborted
// with MPI_Abort at process exit (after main printed its error), so no rank is left waiting.
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& launch,
                                                    const CommOptions& options);

// The exit code every rank of the job gets when a failing MPI communicator aborts it at exit
// (Note [Aborting] in mpi_communicator.cpp): main sets it to its own (2 for a usage error), so
// a job ends with the code of the failure, not a generic 1.
void set_abort_exit_code(int code);

// The version of the NCCL library loaded ("2.28.9"), or "none" in a build without NCCL.
std::string nccl_version();

// NCCL over the GPUs of `bootstrap`'s ranks (which shares the NCCL id and carries collectives
// on host buffers); this process uses CUDA device `device`. Throws in a build without NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     const CommOptions& options);

// MPI when the launch has more than one process, else the single-process one.
std::unique_ptr<Communicator> make_communicator(const LaunchInfo& launch,
                                                const CommOptions& options);

}  // namespace trainer::dist
