// A tensor is plain data: dtype, device, shape, a row stride and a pointer it does not own.
// Buffers own memory; tensors are the views ops take. No autograd state, no virtuals.
//
// Note [Row stride]
// A tensor is a stack of rows: its last dimension is the row, every leading dimension counts
// rows. Rows are `ld()` elements apart: the row length for a contiguous tensor, more for a
// view of some columns of a wider matrix (the query part of a packed qkv tensor, say). Ops
// that need contiguous input assert it.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace trainer {

// Note [Read-only views]
// A Tensor may be written through; a ConstTensor may not: its data is `const void*` and as<T>()
// gives `const T*`. Ops take what they read as ConstTensor and what they write as Tensor, so
// the compiler tells the two apart. A Tensor converts to a ConstTensor, never back; a view of
// a ConstTensor (reshape, rows, columns) is read-only too.
template <bool Writable>
struct TensorView {
  static constexpr int kMaxDims = 4;
  using Data = std::conditional_t<Writable, void*, const void*>;
  template <typename T>
  using Elem = std::conditional_t<Writable, T, const T>;

  Data data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  int64_t row_stride = 0;  // 0: contiguous (see Note [Row stride])

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[size_t(i)];
    return n;
  }
  int64_t dim(int i) const {
    TRAINER_ASSERT(i >= 0 && i < ndim, "dimension {} of a {}-d tensor", i, ndim);
    return shape[size_t(i)];
  }
  // Length of a row (the last dimension) and number of rows (the product of the others).
  int64_t cols() const { return ndim == 0 ? 1 : shape[size_t(ndim - 1)]; }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
  // Elements from one row's start to the next's.
  int64_t ld() const { return row_stride ? row_stride : cols(); }
  bool contiguous() const { return ld() == cols(); }
  // Bytes of a contiguous tensor's elements.
  int64_t bytes() const {
    TRAINER_ASSERT(contiguous(), "bytes() of a strided tensor");
    return numel() * int64_t(dtype_size(dtype));
  }
  bool empty() const { return data == nullptr; }

  template <typename T>
  Elem<T>* as() const {
    TRAINER_ASSERT(dtype == dtype_of<T>(), "tensor of {} read as {}", dtype_name(dtype),
                   dtype_name(dtype_of<T>()));
    return static_cast<Elem<T>*>(data);
  }
  // The same elements seen with another shape (contiguous tensors only).
  TensorView reshape(std::initializer_list<int64_t> new_shape) const;
  // Elements [begin, begin + count) of a contiguous tensor, as a 1-d tensor.
  TensorView flat(int64_t begin, int64_t count) const;
  // Rows [begin, begin + count) of the tensor seen as a (rows, cols) matrix.
  TensorView row_range(int64_t begin, int64_t count) const;
  // Columns [begin, begin + count) of every row: a strided view.
  TensorView col_range(int64_t begin, int64_t count) const;

  // A writable view read only (Note [Read-only views]).
  template <bool W = Writable, std::enable_if_t<W, int> = 0>
  operator TensorView<false>() const {
    return {data, dtype, device, ndim, shape, row_stride};
  }
};

using Tensor = TensorView<true>;        // written through: an op's outputs
using ConstTensor = TensorView<false>;  // read only: an op's inputs

extern template struct TensorView<true>;
extern template struct TensorView<false>;

// A view of `data` with the given shape (row-major, contiguous): writable, or read-only for
// const data.
Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                   Device device = Device::cpu);
ConstTensor make_tensor(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                        Device device = Device::cpu);

}  // namespace trainer
