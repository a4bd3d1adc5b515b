// cuBLASLt's entry points, from the library loaded when the first CUDA product needs it
// (dlopen) rather than when the process starts: loading libcublasLt costs a process about
// 0.4 s and 200 MB of resident memory, which every process of a CUDA build would otherwise pay,
// a CPU run, `trainer plan` or `inspect`, and each rank of a CPU job among them.
#pragma once

#include <cublasLt.h>

namespace trainer::cuda {

// The entry points the products use, each named as cuBLASLt names it without its prefix.
struct CublasLt {
  decltype(&cublasLtGetVersion) GetVersion;
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// The entry points; the first call loads the library (thread-safe), and throws trainer::Error
// naming the library and the loader's reason if it cannot be loaded or lacks one of them.
const CublasLt& cublaslt();

}  // namespace trainer::cuda
