// The CPU backend's table: every op's kernel in cpu/<op>.cpp.
#include "nn/ops/kernels.h"

namespace trainer::nn {

#define TRAINER_CPU_ENTRY(op) .op = &cpu::op,
extern const Kernels kCpuKernels = {.backend = "cpu", TRAINER_OPS(TRAINER_CPU_ENTRY)};
#undef TRAINER_CPU_ENTRY

}  // namespace trainer::nn
