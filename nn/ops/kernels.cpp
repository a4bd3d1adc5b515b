// Which table serves a device.
#include "nn/ops/kernels.h"

#include "runtime/error.h"

namespace trainer::nn {

extern const Kernels kCpuKernels;          // cpu/kernels.cpp
extern const Kernels* const kCudaKernels;  // cuda/kernels.cpp, or null (cuda/absent.cpp)

const Kernels* backend_kernels(Device device) {
  switch (device) {
    case Device::cpu:
      return &kCpuKernels;
    case Device::cuda:
      return kCudaKernels;
  }
  return nullptr;
}

const Kernels& kernels(const Context& ctx) {
  const Kernels* k = backend_kernels(ctx.device);
  if (!k)
    THROW_ERROR("this trainer was built without the {} backend (ops have no kernels there)",
                device_name(ctx.device));
  return *k;
}

}  // namespace trainer::nn
