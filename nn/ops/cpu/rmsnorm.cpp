#include <omp.h>

#include <cmath>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/cpu/sums.h"
#include "nn/ops/kernels.h"
#include "runtime/workspace.h"

namespace trainer::nn::cpu {

namespace {

// With `branch` (R its dtype), the rows normalised are res_out's, res_out[n] = res_in[n] +
// branch[n] written first (the fused residual add); `inp` is res_out then.
template <typename T, typename R = float>
void forward_rows(T* out, float* rstd, const float* inp, const T* w, int64_t N, int64_t C,
                  float eps, float* res_out = nullptr, const float* res_in = nullptr,
                  const R* branch = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    if (branch) residual_add(res_out + n * C, res_in + n * C, branch + n * C, C);
    const float* x = inp + n * C;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / float(C) + eps);
    T* o = out + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) store(o[c], x[c] * r * load(w[c]));
    rstd[n] = r;
  }
}

// One row's: di (C) += its input gradient, pdw (C) += its weight gradient, from d = dout (C),
// x = inp (C) and rstd r (plain pointers, as cpu/layernorm.cpp's backward_row says why). With
// g = w * dout and xhat = x * rstd: dx = rstd * (g - xhat * mean(g * xhat)), dw += dout * xhat.
template <typename T>
inline void backward_row(float* di, float* pdw, const T* d, const float* x, const T* w, float r,
                         int64_t C) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t c = 0; c < C; ++c) dot += load(w[c]) * load(d[c]) * x[c] * r;
  dot /= float(C);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const float xhat = x[c] * r, dc = load(d[c]);
    pdw[c] += xhat * dc;
    di[c] += (load(w[c]) * dc - xhat * dot) * r;
  }
}

template <typename T, typename G>
void backward_rows(float* dinp, G* dw, const T* dout, const float* inp, const T* w,
                   const float* rstd, int64_t N, int64_t C, float* partial, int threads) {
  // Summed over fixed parts of the rows, the parts then added in order (Note
  // [Thread-invariant norm gradients] in cpu/layernorm.cpp).
  const int64_t parts = for_each_row_part(N, C, partial, threads, [&](int64_t n, float* part) {
    backward_row(dinp + n * C, part, dout + n * C, inp + n * C, w, rstd[n], C);
  });
  add_parts(dw, partial, parts, C, C, threads);
}

}  // namespace

void rmsnorm_forward(const Context& ctx, const Tensor& out, const Tensor& rstd,
                     const ConstTensor& inp, const ConstTensor& w, float eps) {
  const int64_t N = inp.rows(), C = inp.cols();
  with_float(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows(out.as<T>(), rstd.as<float>(), inp.as<float>(), w.as<T>(), N, C, eps);
  });
}

void rmsnorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                              const Tensor& rstd, const ConstTensor& res_in,
                              const ConstTensor& branch, const ConstTensor& w, float eps) {
  const int64_t N = res_out.rows(), C = res_out.cols();
  with_floats(out.dtype, branch.dtype, [&](auto ttag, auto rtag) {
    using T = decltype(ttag);
    using R = decltype(rtag);
    forward_rows(out.as<T>(), rstd.as<float>(), res_out.as<float>(), w.as<T>(), N, C, eps,
                 res_out.as<float>(), res_in.as<float>(), branch.as<R>());
  });
}

void rmsnorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw,
                      const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                      const ConstTensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  const int threads = op_threads(ctx);
  Workspace::Scope scratch(ctx.workspace);
  float* partial = scratch.take<float>(norm_parts(N) * C);
  with_floats(dout.dtype, dw.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    backward_rows(dinp.as<float>(), dw.as<G>(), dout.as<T>(), inp.as<float>(), w.as<T>(),
                  rstd.as<float>(), N, C, partial, threads);
  });
}

size_t rmsnorm_backward_workspace(const Context&, int64_t C) {
  return Workspace::bytes_for<float>(kNormParts * C);
}

}  // namespace trainer::nn::cpu
