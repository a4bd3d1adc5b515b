// CUDA linear layer: the products through cuBLASLt (matmul), the bias in its epilogue; the
// bias gradient a thread per column summing the rows in order (deterministic).
#include "nn/ops/cuda_common.cuh"
#include "nn/ops/linear.h"
#include "runtime/gemm.h"

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

void linear_forward(const Context& ctx, const Tensor& out, const Tensor& inp, const Tensor& w,
                    const Tensor& bias, WeightLayout layout) {
  matmul(ctx, out, inp, false, w, layout == WeightLayout::out_in, 1.0f, 0.0f,
         bias.empty() ? nullptr : &bias);
}

void linear_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& w, WeightLayout layout) {
  const bool in_out = layout == WeightLayout::in_out;
  if (!dinp.empty()) matmul(ctx, dinp, dout, false, w, in_out);
  if (in_out)
    matmul(ctx, dw, inp, true, dout, false, 1.0f, 1.0f);
  else
    matmul(ctx, dw, dout, true, inp, false, 1.0f, 1.0f);
  if (dbias.empty()) return;
  TRAINER_ASSERT(dout.contiguous() && dbias.numel() == dout.cols(), "linear_backward bias");
  with_floats(dout.dtype, dbias.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    column_sums_kernel<<<blocks_for(dout.cols(), 128), 128, 0, stream_of(ctx)>>>(
        ptr<G>(dbias), ptr<T>(dout), dout.rows(), dout.cols());
  });
  check_launch("linear_backward");
}

size_t linear_workspace(const Context& ctx, int64_t N, int64_t I, int64_t O, DType act) {
  return matmul_workspace_bytes(ctx, N, O, I, act);
}

}  // namespace trainer::nn::cuda
