#include "runtime/memory.h"

#include "runtime/error.h"
#include "runtime/memory_backend.h"

namespace trainer {

void copy(const Context& ctx, const Tensor& dst, const ConstTensor& src) {
  TRAINER_ASSERT(dst.dtype == src.dtype && dst.numel() == src.numel(), "copy of {} {} into {} {}",
                 src.numel(), dtype_name(src.dtype), dst.numel(), dtype_name(dst.dtype));
  const size_t bytes = size_t(src.bytes());
  if (bytes == 0 || dst.data == src.data) return;
  // The device side's table (the host's for a host copy), ordered with ctx's kernels.
  const MemoryKernels& m = memory_kernels(dst.device != Device::cpu ? dst.device : src.device);
  m.copy_async(dst.data, src.data, bytes, ctx.stream);
  if (dst.device == Device::cpu) m.synchronize(ctx.stream);  // a read-back: the host uses it next
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
  memory_kernels(t.device).zero_async(t.data, bytes, ctx.stream);
}

const MemoryKernels& memory_kernels(Device device) {
  const MemoryKernels* m = device == Device::cpu ? &kCpuMemory : kCudaMemory;
  if (!m)
    THROW_ERROR("this trainer was built without the {} backend (it has no memory)",
                device_name(device));
  return *m;
}

void synchronize(const Context& ctx) {
  memory_kernels(ctx.device).synchronize(ctx.stream);
}

}  // namespace trainer
