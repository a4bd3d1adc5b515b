// Wraps CUDA runtime calls: a failing call throws trainer::Error naming the call and the
// CUDA error string. Only included from .cu files.
#pragma once

#include <cuda_runtime.h>

#include "runtime/error.h"

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    CHECK(err_ == cudaSuccess, "CUDA error in {}: {}", #call, cudaGetErrorString(err_)); \
  } while (0)
