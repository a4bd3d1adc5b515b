#include <omp.h>

#include "nn/ops/cpu_dtype.h"
#include "nn/ops/linear.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"
#include "runtime/workspace.h"

namespace trainer::nn::cpu {

namespace {

// out(O) += the column sums of x(N,O), accumulated in fp32 in row order (threads own column
// slices) and added to out once.
template <typename T, typename G>
void add_column_sums(G* out, const T* x, int64_t N, int64_t O, float* acc) {
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t j0 = O * t / nt, j1 = O * (t + 1) / nt;
    for (int64_t j = j0; j < j1; ++j) acc[j] = load(out[j]);
    for (int64_t n = 0; n < N; ++n) {
      const T* row = x + n * O;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) acc[j] += load(row[j]);
    }
    for (int64_t j = j0; j < j1; ++j) store(out[j], acc[j]);
  }
}

}  // namespace

void linear_forward(const Context& ctx, const Tensor& out, const Tensor& inp, const Tensor& w,
                    const Tensor& bias, WeightLayout layout) {
  PROFILE_SCOPE("linear_forward");
  matmul(ctx, out, inp, false, w, layout == WeightLayout::out_in, 1.0f, 0.0f,
         bias.empty() ? nullptr : &bias);
}

void linear_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& w, WeightLayout layout) {
  PROFILE_SCOPE("linear_backward");
  const bool in_out = layout == WeightLayout::in_out;
  if (!dinp.empty()) matmul(ctx, dinp, dout, false, w, in_out);
  if (in_out)
    matmul(ctx, dw, inp, true, dout, false, 1.0f, 1.0f);
  else
    matmul(ctx, dw, dout, true, inp, false, 1.0f, 1.0f);
  if (dbias.empty()) return;
  TRAINER_ASSERT(dout.contiguous() && dbias.numel() == dout.cols(), "linear_backward bias");
  Workspace::Scope scratch(ctx.workspace);
  float* acc = scratch.take<float>(dout.cols());
  with_floats(dout.dtype, dbias.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    add_column_sums(dbias.as<G>(), dout.as<T>(), dout.rows(), dout.cols(), acc);
  });
}

size_t linear_workspace(const Context& ctx, int64_t N, int64_t I, int64_t O, DType act) {
  size_t gemm = 0;
  for (size_t b : {matmul_workspace_bytes(ctx, N, O, I, act),   // forward
                   matmul_workspace_bytes(ctx, N, I, O, act),   // dinp
                   matmul_workspace_bytes(ctx, I, O, N, act),   // dw (in, out)
                   matmul_workspace_bytes(ctx, O, I, N, act)})  // dw (out, in)
    gemm = std::max(gemm, b);
  return std::max(gemm, Workspace::bytes_for<float>(O));
}

}  // namespace trainer::nn::cpu
