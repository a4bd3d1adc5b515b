// A build without the CUDA backend: its table is absent.
#include "nn/ops/kernels.h"

namespace trainer::nn {

extern const Kernels* const kCudaKernels = nullptr;

}  // namespace trainer::nn
