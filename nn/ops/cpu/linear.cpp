
#include "nn/ops/cpu/dtype.h"
#include "nn/ops/cpu/sums.h"
#include "nn/ops/kernels.h"
#include "runtime/workspace.h"

namespace trainer::nn::cpu {

namespace {

// acc (O) += row (O), in fp32.
template <typename T>
inline void add_row(float* acc, const T* row, int64_t O) {
#pragma omp simd
  for (int64_t j = 0; j < O; ++j) acc[j] += load(row[j]);
}

// out(O) += the column sums of x(N,O) in fp32, as the norms sum their weight gradients (Note
// [Thread-invariant norm gradients] in cpu/layernorm.cpp): the rows cut into norm_parts(N)
// fixed parts, each summed in row order into its row of `partial`, then the parts in order.
// Each thread streams whole rows, and the bits do not depend on the thread count.
template <typename T, typename G>
void add_column_sums(G* out, const T* x, int64_t N, int64_t O, float* partial, int threads) {
  const int64_t parts = for_each_row_part(
      N, O, partial, threads, [&](int64_t n, float* acc) { add_row(acc, x + n * O, O); });
  add_parts(out, partial, parts, O, O, threads);
}

}  // namespace

void linear_bias_grad(const Context& ctx, const Tensor& dbias, const ConstTensor& dout) {
  Workspace::Scope scratch(ctx.workspace);
  float* partial = scratch.take<float>(norm_parts(dout.rows()) * dout.cols());
  with_floats(dout.dtype, dbias.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    add_column_sums(dbias.as<G>(), dout.as<T>(), dout.rows(), dout.cols(), partial,
                    op_threads(ctx));
  });
}

size_t linear_bias_grad_workspace(const Context&, int64_t O) {
  return Workspace::bytes_for<float>(kNormParts * O);
}

}  // namespace trainer::nn::cpu
