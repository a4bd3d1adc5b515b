#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cpu {

void cast(const Context& ctx, const Tensor& dst, const ConstTensor& src) {
  // Contiguous tensors are one long row, split across threads.
  const bool flat = src.contiguous() && dst.contiguous();
  const int64_t rows = flat ? 1 : src.rows(), cols = flat ? src.numel() : src.cols();
  with_floats(src.dtype, dst.dtype, [&](auto stag, auto dtag) {
    using S = decltype(stag);
    using D = decltype(dtag);
    const S* s = src.as<S>();
    D* d = dst.as<D>();
    if (flat) {
#pragma omp parallel for simd schedule(static) if (cols > 65536)
      for (int64_t j = 0; j < cols; ++j) store(d[j], load(s[j]));
      return;
    }
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t i = 0; i < rows; ++i) {
      const S* sr = s + i * src.ld();
      D* dr = d + i * dst.ld();
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) store(dr[j], load(sr[j]));
    }
  });
}

}  // namespace trainer::nn::cpu
