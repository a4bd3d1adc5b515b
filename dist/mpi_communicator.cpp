// The MPI communicator: the engine's thread (dist/comm_engine.h) owns every MPI call after
// MPI_Init and runs the queued collectives in order as non-blocking MPI_I* operations, polled
// against a deadline. See Note [Timeouts and missing ranks].
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <numeric>
#include <thread>

#include <fmt/ranges.h>

#include "dist/comm_engine.h"
#include "dist/communicator.h"
#include "dist/fixed_tree.h"
#include "dist/hosts.h"
#include "dist/mpi_arrivals.h"
#include "dist/mpi_op.h"
#include "dist/mpi_p2p.h"
#include "dist/mpi_process.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::dist {

// Note [Timeouts and missing ranks]
// A collective never hangs: it is started with MPI_I* and tested until a deadline (timeout_s
// from its start). To name the ranks that never reached it, every rank first posts a tiny
// "arrived at #seq" message to each peer (to rank 0 only beyond MpiArrivals::kAllToAll ranks)
// on a separate communicator (dist/mpi_arrivals.h). Arrival alone cannot tell a dead rank: one
// that arrived and then died looks like one still working. So near the deadline a waiting rank
// pings its peers, and every rank answers pings whenever its communication thread runs, busy
// or idle (the engine's idle task). At the deadline the error names the ranks that do not
// answer (dead, stopped, cut off: every rank of a node among them is that node lost) apart from
// those that answer but never arrived (late). After a failure the communicator refuses further
// work, and the job is aborted (Note [Aborting]) so it ends non-zero instead of waiting on a
// dead peer.

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTreeTag = 8;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const LaunchInfo& launch, const CommOptions& options) : options_(options) {
    network_ = mpi_init(launch, options.timeout_s, options.interface);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (rank_ != launch.rank || size_ != launch.world_size) {
      // Not every rank may agree, so nobody can wait for a clean finalize.
      log::error("MPI sees rank {} of {} but the {} launch environment says rank {} of {}", rank_,
                 size_, launch.launcher, launch.rank, launch.world_size);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &arrive_comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(arrive_comm_, MPI_ERRORS_RETURN);
    MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_sum_op_);
    world_rank_ = rank_;
    arrivals_ = std::make_unique<MpiArrivals>(arrive_comm_, rank_, size_);
    arrivals_->start();
    engine_ = std::make_shared<CommEngine>(size_);
    idle_ = engine_->add_idle([this] {
      arrivals_->poll();
      poll_transfers();
    });
    try {
      gather_placement();
    } catch (...) {
      abort_job_at_exit();  // the destructor does not run (Note [Aborting])
      throw;
    }
  }

  // A group of `parent`'s ranks (split()): its own MPI communicators, made on the engine's
  // thread, and the parent's engine, so that every MPI call stays on that one thread and the
  // two communicators' operations run in the one order every rank issues them in.
  MpiCommunicator(const MpiCommunicator& parent, MPI_Comm comm, MPI_Comm arrive_comm, int rank,
                  int size)
      : options_(parent.options_),
        network_(parent.network_),
        world_hosts_(parent.world_hosts_),
        world_roles_(parent.world_roles_),
        world_rank_(parent.world_rank_),
        rank_(rank),
        size_(size),
        comm_(comm),
        arrive_comm_(arrive_comm),
        bf16_sum_op_(parent.bf16_sum_op_),
        arrivals_(std::make_unique<MpiArrivals>(arrive_comm, rank, size)),
        engine_(parent.engine_),
        account_(engine_->add_account()),
        owns_mpi_(false) {
    idle_ = engine_->add_idle([this] {
      arrivals_->start();  // a group's, on the engine's thread, where its communicator was made
      arrivals_->poll();
      poll_transfers();
    });
  }

  ~MpiCommunicator() override {
    engine_->remove_idle(idle_);
    if (!owns_mpi_) {
      if (engine_->broken() || std::uncaught_exceptions() > 0) {
        // Its receives stay posted (the job is aborted at exit): their buffers must outlive
        // whatever MPI still does until then.
        (void)arrivals_.release();
        return;
      }
      close_group();
      return;
    }
    engine_->stop();
    arrivals_->shutdown();
    if (engine_->broken() || std::uncaught_exceptions() > 0) {
      abort_job_at_exit();  // main prints its one error line first (Note [Aborting])
      return;
    }
    MPI_Op_free(&bf16_sum_op_);
    MPI_Finalize();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm comm = MPI_COMM_NULL, arrive = MPI_COMM_NULL;
    int rank = 0, size = 1;
    CommJob job{
        "split",
        0,
        fmt::format(" (color {}, key {})", color, key),
        {},
        [&](const std::string& name, int64_t) {
          const int rc = MPI_Comm_split(comm_, color, key, &comm);
          if (rc != MPI_SUCCESS || MPI_Comm_split(arrive_comm_, color, key, &arrive) != MPI_SUCCESS)
            throw CommFailure{
                fmt::format("{} failed on rank {}: {}", name, world_rank_, mpi_error_string(rc))};
          MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
          MPI_Comm_set_errhandler(arrive, MPI_ERRORS_RETURN);
          MPI_Comm_rank(comm, &rank);
          MPI_Comm_size(comm, &size);
          return 0.0;
        },
        size_,
        account_};
    engine_->submit(std::move(job)).wait();
    std::unique_ptr<MpiCommunicator> group(new MpiCommunicator(*this, comm, arrive, rank, size));
    group->gather_placement();
    return group;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  Work all_reduce_async(void* data, int64_t count, DType type, ReduceOrder order) override {
    check_order(order, count);
    return enqueue(MpiKind::all_reduce, data, data, count, type, order);
  }
  Work reduce_scatter_async(const void* send, void* recv, int64_t count, DType type,
                            ReduceOrder order) override {
    CHECK(count * size_ <= INT_MAX, "reduce_scatter of {} elements per rank is too large", count);
    check_order(order, count);
    return enqueue(MpiKind::reduce_scatter, send, recv, count, type, order);
  }
  Work all_gather_async(const void* send, void* recv, int64_t count, DType type) override {
    CHECK(count * size_ <= INT_MAX, "all_gather of {} elements per rank is too large", count);
    return enqueue(MpiKind::all_gather, send, recv, count, type);
  }
  Work broadcast_async(void* data, int64_t bytes, int root) override {
    CHECK(root >= 0 && root < size_, "broadcast from rank {} of {}", root, size_);
    return enqueue(MpiKind::broadcast, data, data, bytes, DType::u8, ReduceOrder::any, root);
  }
  Work barrier_async(double timeout_s) override {
    return enqueue(MpiKind::barrier, nullptr, nullptr, 0, DType::u8, ReduceOrder::any, 0,
                   timeout_s);
  }

  std::vector<Work> transfer_async(const std::vector<PeerTransfer>& transfers) override {
    std::vector<Work> works;
    for (const PeerTransfer& t : transfers)
      works.push_back(transfer(t.send, t.data, t.count, t.type, t.peer, t.tag));
    return works;
  }

  // This communicator's own, though it may share the engine (split()).
  CommStats stats() const override { return engine_->stats(account_); }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  void name_ranks(std::vector<std::string> roles) override { world_roles_ = std::move(roles); }
  std::string network() const override { return describe(network_); }

 private:
  // A point-to-point transfer: posted on the engine's thread, where the idle task completes it
  // (hurrying the engine while any is in flight), so that it holds up nothing queued after it.
  Work transfer(bool send, void* data, int64_t count, DType type, int peer, int tag) {
    CHECK(peer >= 0 && peer < size_ && peer != rank_ && tag >= 0 && tag < 32768,
          "point-to-point transfer to rank {} of {} with tag {}", peer, size_, tag);
    auto state = std::make_shared<WorkState>();
    const int64_t bytes = count * int64_t(dtype_size(type));
    engine_->submit({send ? "send" : "recv",
                     0,
                     fmt::format(" ({} bytes, rank {})", bytes, peer),
                     {},
                     [=, this](const std::string&, int64_t) {
                       if (!p2p_)
                         p2p_ = std::make_unique<MpiPointToPoint>(comm_, [this](int r) {
                           return rank_name(to_world({r})[0], known_hosts(), world_roles_);
                         });
                       p2p_->post(send, data, bytes, peer, tag, options_.timeout_s, state);
                       poll_transfers();
                       return 0.0;
                     },
                     size_,
                     account_});
    return Work(state);
  }

  // On the engine's thread: completes the transfers that are done.
  void poll_transfers() {
    if (!p2p_) return;
    const bool inflight = p2p_->poll() > 0;
    if (inflight != hurrying_) engine_->hurry(inflight ? 1 : -1);
    hurrying_ = inflight;
  }

  // Each rank's world rank and host (collectives), for messages and the start-up log: the
  // world gathers the hostnames, a group takes them from its parent. Messages name world ranks.
  void gather_placement() {
    if (world_hosts_.empty()) {
      constexpr int64_t kLen = 256;
      std::string mine = host_name();
      mine.resize(size_t(kLen), '\0');
      std::vector<char> all(size_t(kLen * size_));
      all_gather_async(mine.data(), all.data(), kLen, DType::u8).wait();
      for (int r = 0; r < size_; ++r) {
        const char* name = all.data() + r * kLen;
        world_hosts_.emplace_back(name, strnlen(name, size_t(kLen)));
      }
    }
    const std::vector<int64_t> ranks = all_gather(std::vector<int64_t>{world_rank_});
    world_ranks_.assign(ranks.begin(), ranks.end());
    hosts_.clear();
    for (int r : world_ranks_) hosts_.push_back(world_hosts_[size_t(r)]);
  }

  // This communicator's ranks as world ranks (as they are until the placement is gathered).
  std::vector<int> to_world(const std::vector<int>& ranks) const {
    if (world_ranks_.size() != size_t(size_)) return ranks;
    std::vector<int> out;
    for (int r : ranks) out.push_back(world_ranks_[size_t(r)]);
    return out;
  }
  // Each world rank's host once the placement is gathered, else none (messages then name ranks).
  const std::vector<std::string>& known_hosts() const {
    static const std::vector<std::string> none;
    return world_ranks_.size() == size_t(size_) ? world_hosts_ : none;
  }

  void check_order(ReduceOrder order, int64_t count) const {
    if (order != ReduceOrder::fixed_tree) return;
    CHECK((size_ & (size_ - 1)) == 0,
          "a fixed-tree reduction needs a power-of-two number of ranks, not {}", size_);
    CHECK(count <= INT_MAX, "a fixed-tree reduction of {} elements is too large", count);
  }

  Work enqueue(MpiKind kind, const void* send, void* data, int64_t count, DType type,
               ReduceOrder order = ReduceOrder::any, int root = 0, double timeout_s = 0) {
    MpiOp op;
    op.kind = kind;
    op.order = size_ > 1 ? order : ReduceOrder::any;
    op.timeout_s = timeout_s > 0 ? timeout_s : options_.timeout_s;
    op.send = send;
    op.data = data;
    op.count = count;
    op.type = type;
    op.root = root;
    op.seq = next_op_++;  // this communicator's own count, which its ranks share
    return engine_->submit({mpi_kind_name(kind),
                            buffer_bytes(op),
                            mpi_op_detail(op),
                            {},
                            [this, op](const std::string& name, int64_t) mutable {
                              op.name = name;
                              arrivals_->start();
                              return run(op);
                            },
                            size_,
                            account_});
  }

  // A group's end: its requests cancelled and its communicators freed on the engine's thread
  // (unless the engine failed: then the job is aborted at exit, Note [Aborting]).
  void close_group() {
    if (engine_->broken() || std::uncaught_exceptions() > 0) return;
    try {
      engine_
          ->submit({"split",
                    0,
                    " (free)",
                    {},
                    [this](const std::string&, int64_t) {
                      p2p_.reset();
                      if (hurrying_) engine_->hurry(-1);
                      hurrying_ = false;
                      arrivals_->shutdown();
                      MPI_Comm_free(&comm_);
                      MPI_Comm_free(&arrive_comm_);
                      return 0.0;
                    },
                    size_,
                    account_})
          .wait();
    } catch (const std::exception& e) {
      log::warn("freeing an MPI group: {}", e.what());
    }
  }

  // What messages say of the operation after its kind and number.

  // Tests `req` until it completes or the operation's deadline passes. Near the deadline the
  // peers are pinged, so that the error can tell the ranks that are gone from those merely
  // late (Note [Timeouts and missing ranks]).
  void progress(MPI_Request& req, const MpiOp& op, Clock::time_point start) {
    const auto deadline = start + std::chrono::duration<double>(op.timeout_s);
    const auto ping_at = deadline - std::chrono::duration<double>(std::min(1.0, op.timeout_s / 4));
    for (int64_t i = 0;; ++i) {
      int flag = 0;
      int rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS)
        throw CommFailure{
            fmt::format("{} failed on rank {}: {}", op.name, world_rank_, mpi_error_string(rc))};
      if (flag) return;
      if ((i & 63) == 63) engine_->run_idle();  // this and the other groups' notices and pings
      if (Clock::now() > ping_at) arrivals_->ping(op.seq);  // once per operation
      if (Clock::now() > deadline) {
        engine_->run_idle();
        throw CommFailure{fmt::format("{} timed out after {:.1f} s on rank {}: {}", op.name,
                                      op.timeout_s, world_rank_, who_is_missing(op.seq))};
      }
      // Note [Polling]: spin briefly (small collectives finish within microseconds), then sleep
      // in short naps so the communication thread does not steal a core from compute while
      // still driving MPI's progress engine for large reductions.
      if (i < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(i < 2000 ? 20 : 200));
    }
  }

  // Who a timed-out collective #seq waits for: the ranks that do not answer (dead, stopped,
  // or cut off; a whole node of them is named as lost), and those that answer but never
  // arrived (late, or issuing collectives in another order).
  std::string who_is_missing(int64_t seq) const {
    if (!arrivals_->hears_all()) return "rank 0 knows which ranks did not arrive";
    const std::vector<int> silent = arrivals_->silent();
    std::vector<int> late;
    for (int p : arrivals_->missing(seq))
      if (std::find(silent.begin(), silent.end(), p) == silent.end()) late.push_back(p);
    std::vector<int> members(static_cast<size_t>(size_));
    std::iota(members.begin(), members.end(), 0);
    return describe_missing(to_world(silent), to_world(late), known_hosts(), world_rank_,
                            to_world(members), world_roles_);
  }

  // Runs the operation; returns the seconds it took.
  double run(const MpiOp& op) {
    const auto start = Clock::now();
    arrivals_->announce(op.seq);
    if (op.order == ReduceOrder::fixed_tree)
      run_fixed_tree(op, start);
    else
      run_native(op, start);
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // The operation as MPI's own collective (mpi_op.h), each call tested to the deadline.
  void run_native(const MpiOp& op, Clock::time_point start) {
    start_native(op, comm_, rank_, bf16_sum_op_, [&](int rc, MPI_Request& req) {
      started(op, rc);
      progress(req, op, start);
    });
  }

  // The bytes of the operation's whole buffer.
  double buffer_bytes(const MpiOp& op) const {
    const double b = double(op.count) * double(dtype_size(op.type));
    return op.kind == MpiKind::reduce_scatter || op.kind == MpiKind::all_gather ? b * size_ : b;
  }

  // A fixed-tree all-reduce or reduce-scatter (Note [Fixed-tree reductions], dist/fixed_tree.h).
  void run_fixed_tree(const MpiOp& op, Clock::time_point start) {
    const bool scatter = op.kind == MpiKind::reduce_scatter;
    const FixedTree tree(size_, rank_, scatter ? op.count * size_ : op.count, op.type, scatter);
    const size_t es = dtype_size(op.type);
    char* buf = static_cast<char*>(op.data);
    if (scatter) {  // the reduction works on a copy of the whole send buffer
      scratch_.assign(static_cast<const char*>(op.send),
                      static_cast<const char*>(op.send) + size_t(size_ * op.count) * es);
      buf = scratch_.data();
    }
    const std::vector<int> partners = tree.partners();
    for (int round = 0; round < int(partners.size()); ++round) {
      recv_.resize(tree.pack(round, buf, send_));
      exchange(op, partners[size_t(round)], start);
      tree.add_received(round, buf, recv_.data());
    }
    if (scatter) {
      std::memcpy(op.data, buf + size_t(tree.begin()) * es, size_t(tree.end() - tree.begin()) * es);
      return;
    }
    const std::vector<int64_t>& bounds = tree.bounds();
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    for (int k = 0; k < size_; ++k) {
      displs[size_t(k)] = int(bounds[size_t(k)]);
      counts[size_t(k)] = int(bounds[size_t(k) + 1] - bounds[size_t(k)]);
    }
    MPI_Request req = MPI_REQUEST_NULL;
    started(op, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.data, counts.data(),
                                displs.data(), mpi_type(op.type), comm_, &req));
    progress(req, op, start);
  }

  // Sends send_ to `peer` while receiving recv_.size() bytes from it.
  void exchange(const MpiOp& op, int peer, Clock::time_point start) {
    const size_t chunk = size_t(kMpiMaxCount);
    for (size_t off = 0; off < std::max(send_.size(), recv_.size()); off += chunk) {
      MPI_Request rr = MPI_REQUEST_NULL, sr = MPI_REQUEST_NULL;
      if (off < recv_.size())
        started(op, MPI_Irecv(recv_.data() + off, int(std::min(chunk, recv_.size() - off)),
                              MPI_BYTE, peer, kTreeTag, comm_, &rr));
      if (off < send_.size())
        started(op, MPI_Isend(send_.data() + off, int(std::min(chunk, send_.size() - off)),
                              MPI_BYTE, peer, kTreeTag, comm_, &sr));
      progress(rr, op, start);
      progress(sr, op, start);
    }
  }

  void started(const MpiOp& op, int rc) const {
    if (rc != MPI_SUCCESS)
      throw CommFailure{fmt::format("{} failed to start on rank {}: {}", op.name, world_rank_,
                                    mpi_error_string(rc))};
  }

  CommOptions options_;
  NetworkChoice network_;
  std::vector<std::string> world_hosts_;  // each world rank's host; empty until gathered
  std::vector<std::string> world_roles_;  // each world rank's role (name_ranks); may be empty
  int world_rank_ = 0;                    // this process's
  std::vector<int> world_ranks_;          // this communicator's ranks' world ranks
  std::vector<std::string> hosts_;        // this communicator's ranks' hosts
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL, arrive_comm_ = MPI_COMM_NULL;
  MPI_Op bf16_sum_op_ = MPI_OP_NULL;
  std::unique_ptr<MpiArrivals> arrivals_;    // used on the engine's thread
  std::shared_ptr<CommEngine> engine_;       // runs the operations; made once MPI is set up
  int account_ = 0;                          // the engine's statistics this communicator adds to
  int idle_ = 0;                             // its engine's idle task: answering pings
  bool owns_mpi_ = true;                     // the world's communicator: MPI_Finalize at its end
  std::vector<char> scratch_, send_, recv_;  // fixed-tree reductions' buffers (engine's thread)
  int64_t next_op_ = 0;                      // operations issued (the arrival notices' numbers)
  std::unique_ptr<MpiPointToPoint> p2p_;     // transfers (engine's thread), made at the first
  bool hurrying_ = false;                    // the engine is hurried for p2p_'s transfers
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& launch,
                                                    const CommOptions& options) {
  CHECK(options.timeout_s > 0, "communicator timeout_s must be positive, got {}",
        options.timeout_s);
  return std::make_unique<MpiCommunicator>(launch, options);
}

}  // namespace trainer::dist
