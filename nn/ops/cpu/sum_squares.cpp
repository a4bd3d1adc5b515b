#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

void sum_squares(const Context& ctx, const Tensor& out, const ConstTensor& x) {
  // Fixed chunks summed in order: the same bits whatever the thread count or schedule.
  constexpr int64_t kChunks = 256;
  const int64_t n = x.numel();
  double partial[kChunks];
  with_float(x.dtype, [&](auto tag) {
    using G = decltype(tag);
    const G* p = x.as<G>();
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < kChunks; ++c) {
      double s = 0;
      // A vector of partial sums per chunk (the order is fixed by the binary, not the run).
#pragma omp simd reduction(+ : s)
      for (int64_t i = n * c / kChunks; i < n * (c + 1) / kChunks; ++i) {
        const double g = load(p[i]);
        s += g * g;
      }
      partial[c] = s;
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  out.as<double>()[0] = total;
}

size_t sum_squares_workspace(const Context&) {
  return 0;
}

}  // namespace trainer::nn::cpu
