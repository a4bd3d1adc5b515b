// What op tests need: a CPU context with a generous workspace, and tensor views of vectors.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "runtime/context.h"
#include "runtime/tensor.h"
#include "runtime/workspace.h"

namespace trainer::testing {

struct OpEnv {
  // The largest take in the op tests is CPU attention's at T = 150 (ops_grad_test): 64 x 150
  // floats, 37.5 KiB, per OpenMP thread; 256 MiB holds it for ~7000 threads.
  Workspace workspace{size_t(256) << 20, Device::cpu};
  Context ctx;
  explicit OpEnv(CpuBf16Math math = detect_cpu_bf16_math()) {
    ctx.workspace = &workspace;
    ctx.bf16_math = math;
  }
};

// A contiguous view of `v` with `shape` (whose product must be v.size()).
template <typename T>
Tensor view(std::vector<T>& v, std::initializer_list<int64_t> shape) {
  return make_tensor(v.data(), dtype_of<T>(), shape);
}
template <typename T>
Tensor view(const std::vector<T>& v, std::initializer_list<int64_t> shape) {
  return make_tensor(v.data(), dtype_of<T>(), shape);
}

}  // namespace trainer::testing
