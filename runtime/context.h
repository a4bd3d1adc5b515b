// Where an op runs and what it may use: the device (with its index), the stream its work is
// queued on, the scratch workspace, how the CPU does bf16 arithmetic, which attention the GPU
// runs and whether results must be reproducible. Every op takes one; the choices in it are
// made once, where it is made, never read from the environment by an op.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/device.h"

namespace trainer {

class Workspace;

// How bf16 matrix products run on the CPU: oneDNN's bf16 kernels (AVX-512 BF16 or AMX), or the
// bf16 operands converted to fp32 for the fp32 kernels (CPUs without bf16 arithmetic). Both
// accumulate in fp32; only the speed differs (and the summation order).
enum class CpuBf16Math : uint8_t { native, via_fp32 };

struct Context {
  Device device = Device::cpu;
  int device_index = 0;
  void* stream = nullptr;  // cudaStream_t on CUDA; unused on the CPU
  Workspace* workspace = nullptr;
  CpuBf16Math bf16_math = CpuBf16Math::via_fp32;
  int threads = 0;  // CPU threads ops use (and size their scratch for); 0: all of OpenMP's
  // Whether every op gives the same bits on every run: false lets CUDA ops take faster paths
  // whose sums' order varies (cuDNN attention's backward accumulating dQ by atomic adds).
  bool deterministic = true;
  // CUDA: cuDNN's fused attention where it applies (bf16 training passes); false: our own
  // kernel for every call (the parity test runs both).
  bool cudnn_attention = true;
};

// The CPU threads an op on `ctx` uses: ctx.threads, or OpenMP's maximum when that is 0.
int op_threads(const Context& ctx);

// The CPU bf16 path for this machine: native where oneDNN finds AVX-512 BF16 or AMX, else
// via_fp32. The environment variable TRAINER_CPU_BF16=native|fp32 overrides the choice (for
// tests and benchmarks); `why` receives a phrase for the log.
CpuBf16Math detect_cpu_bf16_math(std::string* why = nullptr);

// Whether oneDNN has bf16 kernels for this CPU (AVX-512 BF16 or AMX), whatever the override.
bool cpu_has_bf16_arithmetic();

}  // namespace trainer
