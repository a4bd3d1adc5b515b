// CUDA dropout: one thread per Philox block of four elements of a row, drawing the bits the CPU
// draws (nn/ops/dropout.h).
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

// Thread t takes block k = t % per_row of row i = t / per_row: the row's elements whose
// counters fall in Philox block `(first + i * stride) / 4 + k`. A product, so that a dropped NaN
// or infinity stays one.
template <bool Accumulate, typename In, typename Out>
__global__ void dropout_kernel(Out* out, const In* inp, int64_t rows, int64_t cols, int64_t per_row,
                               DropoutMask mask, uint32_t threshold, float scale) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * per_row) return;
  const int64_t i = t / per_row, row_first = mask.first + i * mask.row_stride;
  const uint64_t block = uint64_t(row_first / 4 + t % per_row);
  const int64_t at = int64_t(block * 4) - row_first;  // the row's element of the first counter
  if (at >= cols) return;
  const Philox4 r = philox({{uint32_t(block), uint32_t(block >> 32), 0, 0}}, mask.key);
  for (int lane = 0; lane < 4; ++lane) {
    const int64_t j = at + lane;
    if (j < 0 || j >= cols) continue;
    const float v = ld(inp[i * cols + j]) * (r.v[lane] >= threshold ? scale : 0.0f);
    if constexpr (Accumulate)
      st(out[i * cols + j], ld(out[i * cols + j]) + v);
    else
      st(out[i * cols + j], v);
  }
}

}  // namespace

void dropout(const Context& ctx, const Tensor& out, const ConstTensor& inp, const DropoutMask& mask,
             bool accumulate) {
  // A contiguous run of counters is one row; a column slice's rows are each their own.
  const int64_t rows = mask.row_stride ? inp.rows() : 1,
                cols = mask.row_stride ? inp.cols() : inp.numel();
  // The blocks a row's counters touch: up to 3 before its first in the first block.
  const int64_t per_row = mask.row_stride ? (cols + 6) / 4 : (mask.first % 4 + cols + 3) / 4;
  if (rows * per_row == 0) return;
  with_floats(inp.dtype, out.dtype, [&](auto ti, auto to) {
    using In = decltype(ti);
    using Out = decltype(to);
    const auto launch = [&](auto kernel) {
      kernel<<<blocks_for(rows * per_row), kThreads, 0, stream_of(ctx)>>>(
          ptr<Out>(out), ptr<In>(inp), rows, cols, per_row, mask, dropout_threshold(mask.p),
          dropout_scale(mask.p));
    };
    if (accumulate)
      launch(dropout_kernel<true, In, Out>);
    else
      launch(dropout_kernel<false, In, Out>);
  });
  check_launch("dropout");
}

}  // namespace trainer::nn::cuda
