#include <algorithm>

#include "nn/ops/cpu/dropout_span.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

namespace {

// The op over `rows` adjacent rows of `cols` elements, row i's first counter
// mask.first + i * mask.row_stride, a chunk of a row per thread at a time.
template <bool Accumulate, typename In, typename Out>
void mask_rows(const Context& ctx, Out* y, const In* x, int64_t rows, int64_t cols,
               const DropoutMask& mask) {
  constexpr int64_t kChunk = 4096;  // a multiple of 4
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(op_threads(ctx))
  for (int64_t c = 0; c < rows * chunks; ++c) {
    const int64_t i = c / chunks, j = c % chunks * kChunk, at = i * cols + j;
    dropout_span<Accumulate>(y + at, x + at, std::min(kChunk, cols - j), mask,
                             mask.first + i * mask.row_stride + j);
  }
}

}  // namespace

void dropout(const Context& ctx, const Tensor& out, const ConstTensor& inp, const DropoutMask& mask,
             bool accumulate) {
  // A contiguous run of counters is one row; a column slice's rows are each their own.
  const int64_t rows = mask.row_stride ? inp.rows() : 1,
                cols = mask.row_stride ? inp.cols() : inp.numel();
  with_floats(inp.dtype, out.dtype, [&](auto ti, auto to) {
    using In = decltype(ti);
    using Out = decltype(to);
    const In* x = inp.as<In>();
    Out* y = out.as<Out>();
    if (accumulate)
      mask_rows<true>(ctx, y, x, rows, cols, mask);
    else
      mask_rows<false>(ctx, y, x, rows, cols, mask);
  });
}

}  // namespace trainer::nn::cpu
