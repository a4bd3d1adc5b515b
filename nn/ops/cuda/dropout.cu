// CUDA dropout: one thread per Philox block of four elements, drawing the bits the CPU draws
// (nn/ops/dropout.h).
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

// One thread per Philox block (four counters, as the CPU draws them): block `first / 4 + t`,
// its elements of [0, n). A product, so that a dropped NaN or infinity stays one.
template <typename In, typename Out>
__global__ void dropout_kernel(Out* out, const In* inp, int64_t n, DropoutMask mask,
                               uint32_t threshold, float scale) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t block = uint64_t(mask.first / 4 + t);
  const int64_t at = int64_t(block * 4) - mask.first;  // element of the block's first counter
  if (at >= n) return;
  const Philox4 r = philox({{uint32_t(block), uint32_t(block >> 32), 0, 0}}, mask.key);
  for (int lane = 0; lane < 4; ++lane) {
    const int64_t i = at + lane;
    if (i >= 0 && i < n) st(out[i], ld(inp[i]) * (r.v[lane] >= threshold ? scale : 0.0f));
  }
}

}  // namespace

void dropout(const Context& ctx, const Tensor& out, const ConstTensor& inp,
             const DropoutMask& mask) {
  const int64_t n = inp.numel();
  with_floats(inp.dtype, out.dtype, [&](auto ti, auto to) {
    using In = decltype(ti);
    using Out = decltype(to);
    const int64_t blocks = (mask.first + n + 3) / 4 - mask.first / 4;
    dropout_kernel<<<blocks_for(blocks), kThreads, 0, stream_of(ctx)>>>(
        ptr<Out>(out), ptr<In>(inp), n, mask, dropout_threshold(mask.p), dropout_scale(mask.p));
  });
  check_launch("dropout");
}

}  // namespace trainer::nn::cuda
