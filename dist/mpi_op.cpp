// See mpi_op.h.
#include "dist/mpi_op.h"

#include <algorithm>

#include "dist/fixed_tree.h"
#include "runtime/error.h"

namespace trainer::dist {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::bf16:
      return MPI_UINT16_T;  // summed by the bf16 op below
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_BYTE;
    case DType::f16:
      return MPI_UINT16_T;  // moved, never summed (nothing computes in F16)
  }
  return MPI_BYTE;
}

extern "C" void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  add_into(DType::bf16, inout, in, *len);
}

const char* mpi_kind_name(MpiKind k) {
  switch (k) {
    case MpiKind::all_reduce:
      return "all_reduce";
    case MpiKind::reduce_scatter:
      return "reduce_scatter";
    case MpiKind::all_gather:
      return "all_gather";
    case MpiKind::broadcast:
      return "broadcast";
    case MpiKind::barrier:
      return "barrier";
  }
  return "?";
}

std::string mpi_op_detail(const MpiOp& op) {
  if (op.kind == MpiKind::barrier) return {};
  if (op.kind == MpiKind::broadcast)
    return fmt::format(" ({} bytes from rank {})", op.count, op.root);
  return fmt::format(" ({} x {})", op.count, dtype_name(op.type));
}

void start_native(const MpiOp& op, MPI_Comm comm, int rank, MPI_Op bf16_sum_op,
                  const MpiWait& wait) {
  MPI_Request req = MPI_REQUEST_NULL;
  const MPI_Datatype type = mpi_type(op.type);
  const MPI_Op sum = op.type == DType::bf16 ? bf16_sum_op : MPI_SUM;
  TRAINER_ASSERT(op.type != DType::f16 ||
                     (op.kind != MpiKind::all_reduce && op.kind != MpiKind::reduce_scatter),
                 "F16 is never summed");
  const size_t esize = dtype_size(op.type);
  switch (op.kind) {
    case MpiKind::all_reduce:
      for (int64_t off = 0; off < op.count; off += kMpiMaxCount) {
        const int n = int(std::min(kMpiMaxCount, op.count - off));
        wait(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(op.data) + size_t(off) * esize, n,
                            type, sum, comm, &req),
             req);
      }
      break;
    case MpiKind::broadcast:
      for (int64_t off = 0; off < op.count; off += kMpiMaxCount) {
        const int n = int(std::min(kMpiMaxCount, op.count - off));
        wait(MPI_Ibcast(static_cast<char*>(op.data) + off, n, MPI_BYTE, op.root, comm, &req), req);
      }
      break;
    case MpiKind::reduce_scatter:
      wait(MPI_Ireduce_scatter_block(op.send == op.data ? MPI_IN_PLACE : op.send, op.data,
                                     int(op.count), type, sum, comm, &req),
           req);
      break;
    case MpiKind::all_gather: {
      const void* in_place = static_cast<char*>(op.data) + size_t(rank * op.count) * esize;
      wait(MPI_Iallgather(op.send == in_place ? MPI_IN_PLACE : op.send, int(op.count), type,
                          op.data, int(op.count), type, comm, &req),
           req);
      break;
    }
    case MpiKind::barrier:
      wait(MPI_Ibarrier(comm, &req), req);
      break;
  }
}

}  // namespace trainer::dist
