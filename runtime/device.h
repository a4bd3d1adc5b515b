// Where memory lives and kernels run. Each value has its backend's tables: kernels
// (nn/ops/kernels.h), matrix products (runtime/gemm_backend.h) and memory
// (runtime/memory_backend.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/enum_names.h"

namespace trainer {

enum class Device : uint8_t { cpu, cuda };

inline constexpr EnumNames<Device, 2> kDeviceNames{
    "run.device", {{{Device::cpu, "cpu"}, {Device::cuda, "cuda"}}}};

constexpr std::string_view device_name(Device d) {
  return kDeviceNames.name(d);
}

// True when this binary was built with the CUDA backend.
bool cuda_built();
// Number of usable CUDA devices (0 without the backend, a driver or a GPU).
int cuda_device_count();
// The versions of the CUDA libraries this process has loaded, as they report themselves: the
// runtime, the driver, cuBLASLt (loading it) and cuDNN, "CUDA runtime 13.0, driver 13.0,
// cuBLASLt 13.0.0, cuDNN 9.14.0" (NCCL's is dist::nccl_version()); "no CUDA backend" without it.
std::string cuda_versions();
// cudnnGetVersion() of the loaded cuDNN (91400 for 9.14.0); 0 without the CUDA backend.
int64_t cudnn_version();

}  // namespace trainer
