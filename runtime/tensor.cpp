#include "runtime/tensor.h"

namespace trainer {

namespace {

template <typename Data>
Data offset_bytes(Data p, int64_t elements, DType t) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Data>>, const char, char>;
  return static_cast<Byte*>(p) + elements * int64_t(dtype_size(t));
}

template <bool Writable>
TensorView<Writable> view(typename TensorView<Writable>::Data data, DType dtype,
                          std::initializer_list<int64_t> shape, Device device) {
  TensorView<Writable> t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  TRAINER_ASSERT(shape.size() <= size_t(t.kMaxDims), "{} dimensions", shape.size());
  for (int64_t s : shape) {
    TRAINER_ASSERT(s >= 0, "negative extent {}", s);
    t.shape[size_t(t.ndim++)] = s;
  }
  return t;
}

}  // namespace

Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  return view<true>(data, dtype, shape, device);
}

ConstTensor make_tensor(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                        Device device) {
  return view<false>(data, dtype, shape, device);
}

template <bool W>
TensorView<W> TensorView<W>::reshape(std::initializer_list<int64_t> new_shape) const {
  TRAINER_ASSERT(contiguous(), "reshape of a strided tensor");
  TensorView t = view<W>(data, dtype, new_shape, device);
  TRAINER_ASSERT(t.numel() == numel(), "reshape of {} elements to {}", numel(), t.numel());
  return t;
}

template <bool W>
TensorView<W> TensorView<W>::flat(int64_t begin, int64_t count) const {
  TRAINER_ASSERT(contiguous() && begin >= 0 && count >= 0 && begin + count <= numel(),
                 "flat range [{}, {}) of {} elements", begin, begin + count, numel());
  return view<W>(offset_bytes(data, begin, dtype), dtype, {count}, device);
}

template <bool W>
TensorView<W> TensorView<W>::row_range(int64_t begin, int64_t count) const {
  TRAINER_ASSERT(begin >= 0 && count >= 0 && begin + count <= rows(), "rows [{}, {}) of {}", begin,
                 begin + count, rows());
  TensorView t = view<W>(offset_bytes(data, begin * ld(), dtype), dtype, {count, cols()}, device);
  t.row_stride = row_stride;
  return t;
}

template <bool W>
TensorView<W> TensorView<W>::col_range(int64_t begin, int64_t count) const {
  TRAINER_ASSERT(ndim >= 1, "columns of a 0-d tensor");
  TRAINER_ASSERT(begin >= 0 && count >= 0 && begin + count <= cols(), "columns [{}, {}) of {}",
                 begin, begin + count, cols());
  TensorView t = *this;
  t.data = offset_bytes(data, begin, dtype);
  t.shape[size_t(ndim - 1)] = count;
  t.row_stride = ld();
  return t;
}

template struct TensorView<true>;
template struct TensorView<false>;

}  // namespace trainer
