// A tensor is plain data: dtype, device, shape and a pointer it does not own. Buffers own
// memory; tensors are views handed to ops. No autograd state, no virtuals.
#pragma once

#include <array>
#include <cassert>
#include <cstdint>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace trainer {

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  int64_t bytes() const { return numel() * int64_t(dtype_size(dtype)); }
  int64_t dim(int i) const {
    assert(i >= 0 && i < ndim);
    return shape[i];
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// A view of `data` with the given shape (row-major, contiguous).
inline Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                          Device device = Device::cpu) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  assert(shape.size() <= Tensor::kMaxDims);
  for (int64_t s : shape) t.shape[t.ndim++] = s;
  return t;
}

}  // namespace trainer
