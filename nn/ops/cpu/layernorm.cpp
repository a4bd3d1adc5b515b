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
void forward_rows(T* out, float* mean, float* rstd, const float* inp, const T* w, const T* b,
                  int64_t N, int64_t C, float eps, float* res_out = nullptr,
                  const float* res_in = nullptr, const R* branch = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    if (branch) residual_add(res_out + n * C, res_in + n * C, branch + n * C, C);
    const float* x = inp + n * C;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    const float m = s / float(C);
    float var = 0;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(var / float(C) + eps);
    T* o = out + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) store(o[c], (x[c] - m) * r * load(w[c]) + load(b[c]));
    mean[n] = m;
    rstd[n] = r;
  }
}

// Note [Thread-invariant norm gradients]
// dw and db sum over every row. The rows are cut into a fixed number of parts (kNormParts, or N
// when fewer), each part summed in row order into its own fp32 row of `partial`, and the
// parts added in order afterwards: the bits depend on N alone, not on the threads the ops
// run with or on OpenMP's scheduling, so a rank computes the same gradient with 1 thread or
// 16 (dist.deterministic at another world size relies on it).

// One row: di (C) += its input gradient, pdw and pdb (C) += its weight and bias gradients,
// from the row's d = dout (C), x = inp (C), mean m and rstd r. A function over plain pointers:
// GCC vectorises these loops with gathers when they read a lambda's captures.
template <typename T>
inline void backward_row(float* di, float* pdw, float* pdb, const T* d, const float* x, const T* w,
                         float m, float r, int64_t C) {
  float dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int64_t c = 0; c < C; ++c) {
    const float xhat = (x[c] - m) * r;
    const float dn = load(w[c]) * load(d[c]);
    dnorm_mean += dn;
    dnorm_norm_mean += dn * xhat;
  }
  dnorm_mean /= float(C);
  dnorm_norm_mean /= float(C);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const float xhat = (x[c] - m) * r;
    const float dc = load(d[c]);
    pdb[c] += dc;
    pdw[c] += xhat * dc;
    di[c] += (load(w[c]) * dc - dnorm_mean - xhat * dnorm_norm_mean) * r;
  }
}

template <typename T, typename G>
void backward_rows(float* dinp, G* dw, G* db, const T* dout, const float* inp, const T* w,
                   const float* mean, const float* rstd, int64_t N, int64_t C, float* partial,
                   int threads) {
  const int64_t parts = for_each_row_part(N, 2 * C, partial, threads, [&](int64_t n, float* part) {
    backward_row(dinp + n * C, part, part + C, dout + n * C, inp + n * C, w, mean[n], rstd[n], C);
  });
  add_parts(dw, partial, parts, 2 * C, C, threads);
  add_parts(db, partial + C, parts, 2 * C, C, threads);
}

}  // namespace

void layernorm_forward(const Context& ctx, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd, const ConstTensor& inp, const ConstTensor& w,
                       const ConstTensor& b, float eps) {
  const int64_t N = inp.rows(), C = inp.cols();
  with_float(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows(out.as<T>(), mean.as<float>(), rstd.as<float>(), inp.as<float>(), w.as<T>(),
                 b.as<T>(), N, C, eps);
  });
}

void layernorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                                const Tensor& mean, const Tensor& rstd, const ConstTensor& res_in,
                                const ConstTensor& branch, const ConstTensor& w,
                                const ConstTensor& b, float eps) {
  const int64_t N = res_out.rows(), C = res_out.cols();
  with_floats(out.dtype, branch.dtype, [&](auto ttag, auto rtag) {
    using T = decltype(ttag);
    using R = decltype(rtag);
    forward_rows(out.as<T>(), mean.as<float>(), rstd.as<float>(), res_out.as<float>(), w.as<T>(),
                 b.as<T>(), N, C, eps, res_out.as<float>(), res_in.as<float>(), branch.as<R>());
  });
}

void layernorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& db,
                        const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                        const ConstTensor& mean, const ConstTensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  const int threads = op_threads(ctx);
  Workspace::Scope scratch(ctx.workspace);
  float* partial = scratch.take<float>(norm_parts(N) * 2 * C);
  with_floats(dout.dtype, dw.dtype, [&](auto ttag, auto gtag) {
    using T = decltype(ttag);
    using G = decltype(gtag);
    backward_rows(dinp.as<float>(), dw.as<G>(), db.as<G>(), dout.as<T>(), inp.as<float>(),
                  w.as<T>(), mean.as<float>(), rstd.as<float>(), N, C, partial, threads);
  });
}

size_t layernorm_backward_workspace(const Context&, int64_t C) {
  return Workspace::bytes_for<float>(kNormParts * 2 * C);
}

}  // namespace trainer::nn::cpu
