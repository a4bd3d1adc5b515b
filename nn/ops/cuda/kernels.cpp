// The CUDA backend's table: every op's kernel in cuda/<op>.cu (built with the CUDA backend).
#include "nn/ops/kernels.h"

namespace trainer::nn {

#define TRAINER_CUDA_ENTRY(op) .op = &cuda::op,
static const Kernels kCudaTable = {.backend = "cuda", TRAINER_OPS(TRAINER_CUDA_ENTRY)};
#undef TRAINER_CUDA_ENTRY
extern const Kernels* const kCudaKernels = &kCudaTable;

}  // namespace trainer::nn
