// CUDA casts between fp32 and bf16 over strided rows: one thread per element.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

template <typename D, typename S>
__global__ void cast_kernel(D* dst, int64_t ldd, const S* src, int64_t lds, int64_t rows,
                            int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  st(dst[r * ldd + c], ld(src[r * lds + c]));
}

}  // namespace

void cast(const Context& ctx, const Tensor& dst, const ConstTensor& src) {
  const int64_t rows = src.rows(), cols = src.cols();
  with_floats(dst.dtype, src.dtype, [&](auto dtag, auto stag) {
    using D = decltype(dtag);
    using S = decltype(stag);
    cast_kernel<<<blocks_for(rows * cols), kThreads, 0, stream_of(ctx)>>>(
        ptr<D>(dst), dst.ld(), ptr<S>(src), src.ld(), rows, cols);
  });
  check_launch("cast");
}

}  // namespace trainer::nn::cuda
