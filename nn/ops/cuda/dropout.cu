// CUDA dropout: one thread per element, drawing the bits the CPU draws (nn/ops/dropout.h).
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

template <typename In, typename Out>
__global__ void dropout_kernel(Out* out, const In* inp, int64_t n, DropoutMask mask,
                               uint32_t threshold, float scale) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const bool keep = dropout_bits(mask.key, uint64_t(mask.first + i)) >= threshold;
  st(out[i], keep ? ld(inp[i]) * scale : 0.0f);
}

}  // namespace

void dropout(const Context& ctx, const Tensor& out, const ConstTensor& inp,
             const DropoutMask& mask) {
  const int64_t n = inp.numel();
  with_floats(inp.dtype, out.dtype, [&](auto ti, auto to) {
    using In = decltype(ti);
    using Out = decltype(to);
    dropout_kernel<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(
        ptr<Out>(out), ptr<In>(inp), n, mask, dropout_threshold(mask.p), dropout_scale(mask.p));
  });
  check_launch("dropout");
}

}  // namespace trainer::nn::cuda
