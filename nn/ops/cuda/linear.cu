// CUDA bias gradient of the linear layer (whose products go through matmul, cuBLASLt): column
// sums of dout over the rows in a fixed order (column_sums.cuh: deterministic, no atomics).
#include "nn/ops/cuda/column_sums.cuh"
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

template <typename T>
struct BiasGradTerm {
  const T* dout;
  int64_t O;
  __device__ void operator()(int64_t n, int64_t j, float* acc) const {
    acc[0] += ld(dout[n * O + j]);
  }
};

}  // namespace

void linear_bias_grad(const Context& ctx, const Tensor& dbias, const ConstTensor& dout) {
  with_floats(dout.dtype, dbias.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    column_sums<1>(ctx, ColumnOutputs<G, 1>{{ptr<G>(dbias)}},
                   BiasGradTerm<T>{ptr<T>(dout), dout.cols()}, dout.rows(), dout.cols());
  });
  check_launch("linear_bias_grad");
}

size_t linear_bias_grad_workspace(const Context&, int64_t O) {
  return column_sums_workspace(1, O);
}

}  // namespace trainer::nn::cuda
