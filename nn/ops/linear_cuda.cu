// CUDA bias gradient of the linear layer (whose products go through matmul, cuBLASLt): a
// thread per column summing the rows in order (deterministic).
#include "nn/ops/cuda_common.cuh"
#include "nn/ops/linear.h"

namespace trainer::nn::cuda {

namespace {

template <typename T, typename G>
__global__ void column_sums_kernel(G* out, const T* x, int64_t N, int64_t O) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= O) return;
  float acc = ld(out[j]);
  for (int64_t n = 0; n < N; ++n) acc += ld(x[n * O + j]);
  st(out[j], acc);
}

}  // namespace

void linear_bias_grad(const Context& ctx, const Tensor& dbias, const Tensor& dout) {
  with_floats(dout.dtype, dbias.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    column_sums_kernel<<<blocks_for(dout.cols(), 128), 128, 0, stream_of(ctx)>>>(
        ptr<G>(dbias), ptr<T>(dout), dout.rows(), dout.cols());
  });
  check_launch("linear_bias_grad");
}

size_t linear_bias_grad_workspace(int64_t) {
  return 0;
}

}  // namespace trainer::nn::cuda
