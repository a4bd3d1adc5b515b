#include <algorithm>

#include "nn/ops/cpu/dropout_span.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

void dropout(const Context& ctx, const Tensor& out, const ConstTensor& inp,
             const DropoutMask& mask) {
  const int64_t n = inp.numel();
  constexpr int64_t kChunk = 4096;  // elements a thread masks at a time (a multiple of 4)
  with_floats(inp.dtype, out.dtype, [&](auto ti, auto to) {
    using In = decltype(ti);
    using Out = decltype(to);
    const In* x = inp.as<In>();
    Out* y = out.as<Out>();
#pragma omp parallel for schedule(static) num_threads(op_threads(ctx))
    for (int64_t i = 0; i < n; i += kChunk)
      dropout_span(y + i, x + i, std::min(kChunk, n - i), mask, mask.first + i);
  });
}

}  // namespace trainer::nn::cpu
