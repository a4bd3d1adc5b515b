// The CUDA libraries' versions as loaded (runtime/device.h): what a GPU run logs at start-up,
// since the library found at run time, not the headers built against, decides what runs.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <fmt/format.h>

#include "runtime/cuda/cublaslt.h"
#include "runtime/device.h"

namespace trainer {

namespace {

// CUDA's encoding, 1000 major + 10 minor: "13.0".
std::string cuda_version(int v) {
  return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : std::string("?");
}

// cuBLASLt's and cuDNN's (9.x on): 10000 major + 100 minor + patch.
std::string library_version(size_t v) {
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

}  // namespace

int64_t cudnn_version() {
  return int64_t(cudnnGetVersion());
}

std::string cuda_versions() {
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) cudaGetLastError();
  if (cudaDriverGetVersion(&driver) != cudaSuccess) cudaGetLastError();
  std::string cublaslt;
  try {
    cublaslt = library_version(cuda::cublaslt().GetVersion());
  } catch (const std::exception& e) {
    cublaslt = fmt::format("not loaded ({})", e.what());
  }
  return fmt::format("CUDA runtime {}, driver {}, cuBLASLt {}, cuDNN {}", cuda_version(runtime),
                     cuda_version(driver), cublaslt, library_version(cudnnGetVersion()));
}

}  // namespace trainer
