#include "runtime/tensor.h"

namespace trainer {

namespace {
void* offset_bytes(void* p, int64_t elements, DType t) {
  return static_cast<char*>(p) + elements * int64_t(dtype_size(t));
}
}  // namespace

Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  TRAINER_ASSERT(shape.size() <= size_t(Tensor::kMaxDims), "{} dimensions", shape.size());
  for (int64_t s : shape) {
    TRAINER_ASSERT(s >= 0, "negative extent {}", s);
    t.shape[size_t(t.ndim++)] = s;
  }
  return t;
}

Tensor make_tensor(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                   Device device) {
  return make_tensor(const_cast<void*>(data), dtype, shape, device);
}

Tensor Tensor::reshape(std::initializer_list<int64_t> new_shape) const {
  TRAINER_ASSERT(contiguous(), "reshape of a strided tensor");
  Tensor t = make_tensor(data, dtype, new_shape, device);
  TRAINER_ASSERT(t.numel() == numel(), "reshape of {} elements to {}", numel(), t.numel());
  return t;
}

Tensor Tensor::flat(int64_t begin, int64_t count) const {
  TRAINER_ASSERT(contiguous() && begin >= 0 && count >= 0 && begin + count <= numel(),
                 "flat range [{}, {}) of {} elements", begin, begin + count, numel());
  return make_tensor(offset_bytes(data, begin, dtype), dtype, {count}, device);
}

Tensor Tensor::row_range(int64_t begin, int64_t count) const {
  TRAINER_ASSERT(begin >= 0 && count >= 0 && begin + count <= rows(), "rows [{}, {}) of {}", begin,
                 begin + count, rows());
  Tensor t = make_tensor(offset_bytes(data, begin * ld(), dtype), dtype, {count, cols()}, device);
  t.row_stride = row_stride;
  return t;
}

Tensor Tensor::col_range(int64_t begin, int64_t count) const {
  TRAINER_ASSERT(ndim >= 1, "columns of a 0-d tensor");
  TRAINER_ASSERT(begin >= 0 && count >= 0 && begin + count <= cols(), "columns [{}, {}) of {}",
                 begin, begin + count, cols());
  Tensor t = *this;
  t.data = offset_bytes(data, begin, dtype);
  t.shape[size_t(ndim - 1)] = count;
  t.row_stride = ld();
  return t;
}

}  // namespace trainer
