// One collective as the MPI communicator queues it (dist/mpi_communicator.cpp), and MPI's view
// of the trainer's dtypes: the datatype that moves each, and the bf16 sum MPI lacks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

#include "dist/communicator.h"
#include "runtime/dtype.h"

namespace trainer::dist {

// Elements per MPI call: MPI's counts are int.
inline constexpr int64_t kMpiMaxCount = int64_t(1) << 30;

// The collectives the MPI communicator runs.
enum class MpiKind { all_reduce, reduce_scatter, all_gather, broadcast, barrier };

// "all_reduce", ...: the operation's name in messages.
const char* mpi_kind_name(MpiKind k);

// One queued collective: its buffers, dtype, reduction order, root and deadline.
struct MpiOp {
  MpiKind kind = MpiKind::barrier;
  const void* send = nullptr;
  void* data = nullptr;
  int64_t count = 0;
  DType type = DType::u8;
  ReduceOrder order = ReduceOrder::any;
  int root = 0;
  double timeout_s = 0;  // the deadline, from the operation's start
  // Set by the engine as it runs the operation (Note [Communication engine]).
  int64_t seq = 0;
  std::string name;  // for messages: "all_reduce #12 (4096 x fp32)"
};

// What a message adds to the operation's name: " (4096 x fp32)", " (64 bytes from rank 0)".
std::string mpi_op_detail(const MpiOp& op);

// Starts `op` as MPI's own collective on `comm` (where this process is `rank`), one call per
// kMpiMaxCount elements, handing each call's return code and request to `wait`, which completes
// it before the next starts. bf16 sums use `bf16_sum_op` (bf16_sum).
using MpiWait = std::function<void(int rc, MPI_Request& req)>;
void start_native(const MpiOp& op, MPI_Comm comm, int rank, MPI_Op bf16_sum_op,
                  const MpiWait& wait);

// The MPI datatype that carries `t` (bf16 and F16 as 16-bit words).
MPI_Datatype mpi_type(DType t);

// MPI has no bf16: sums of bf16 buffers go through this user-defined op (MPI_Op_create), which
// adds each pair in fp32 and rounds the result once (what NCCL's bf16 sum does).
extern "C" void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*);

}  // namespace trainer::dist
