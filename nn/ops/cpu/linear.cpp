#include <omp.h>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"
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

void linear_bias_grad(const Context& ctx, const Tensor& dbias, const ConstTensor& dout) {
  Workspace::Scope scratch(ctx.workspace);
  float* acc = scratch.take<float>(dout.cols());
  with_floats(dout.dtype, dbias.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    add_column_sums(dbias.as<G>(), dout.as<T>(), dout.rows(), dout.cols(), acc);
  });
}

size_t linear_bias_grad_workspace(const Context&, int64_t O) {
  return Workspace::bytes_for<float>(O);
}

}  // namespace trainer::nn::cpu
