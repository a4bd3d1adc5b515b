// One table of matrix products per backend, as gemm.h's contracts describe them: gemm.cpp checks
// the shapes, picks ctx's backend's table and calls it. A backend without a fused epilogue has
// a null entry (the caller then runs the product and the element-wise op apart); a backend this
// build lacks has no table.
#pragma once

#include <cstddef>

#include "runtime/gemm.h"

namespace trainer {

struct GemmKernels {
  decltype(&matmul) product;
  decltype(&matmul_gelu) gelu;            // null: no GELU_AUX epilogue
  decltype(&matmul_bias_grad) bias_grad;  // null: no BGRADA epilogue
  decltype(&matmul_dgelu) dgelu;          // null: no DGELU epilogue
  decltype(&matmul_workspace_bytes) workspace_bytes;
};

extern const GemmKernels kCpuGemm;          // cpu/gemm.cpp: oneDNN
extern const GemmKernels* const kCudaGemm;  // cuda/gemm.cu: cuBLASLt; null without CUDA

}  // namespace trainer
