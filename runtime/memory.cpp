#include "runtime/memory.h"

#include <cstring>

#include "runtime/cuda/memory.h"
#include "runtime/error.h"

namespace trainer {

void copy(const Context& ctx, const Tensor& dst, const ConstTensor& src) {
  TRAINER_ASSERT(dst.dtype == src.dtype && dst.numel() == src.numel(), "copy of {} {} into {} {}",
                 src.numel(), dtype_name(src.dtype), dst.numel(), dtype_name(dst.dtype));
  const size_t bytes = size_t(src.bytes());
  if (bytes == 0 || dst.data == src.data) return;
  if (dst.device == Device::cpu && src.device == Device::cpu) {
    std::memmove(dst.data, src.data, bytes);
  } else if (dst.device == Device::cpu) {  // a read-back: the host uses it next
    cuda_copy_async(dst.data, src.data, bytes, ctx.stream);
    cuda_synchronize(ctx.stream);
  } else {  // ordered with ctx's kernels
    cuda_copy_async(dst.data, src.data, bytes, ctx.stream);
  }
}

std::vector<float> read_as_f32(const Context& ctx, const ConstTensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::f32) {
    copy(ctx, make_tensor(out.data(), DType::f32, {t.numel()}), t);
    return out;
  }
  TRAINER_ASSERT(t.dtype == DType::bf16, "read_as_f32 of {}", dtype_name(t.dtype));
  std::vector<bf16> raw(out.size());
  copy(ctx, make_tensor(raw.data(), DType::bf16, {t.numel()}), t);
  for (size_t i = 0; i < raw.size(); ++i) out[i] = to_float(raw[i]);
  return out;
}

void fill_zero(const Context& ctx, const Tensor& t) {
  const size_t bytes = size_t(t.bytes());
  if (bytes == 0) return;
  switch (t.device) {
    case Device::cpu:
      std::memset(t.data, 0, bytes);
      break;
    case Device::cuda:
      cuda_memset_zero_async(t.data, bytes, ctx.stream);
      break;
  }
}

void synchronize(const Context& ctx) {
  if (ctx.device == Device::cuda) cuda_synchronize(ctx.stream);
}

}  // namespace trainer
