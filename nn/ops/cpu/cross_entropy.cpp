#include <cmath>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"
#include "nn/ops/cpu/vec_math.h"
#include "runtime/workspace.h"

namespace trainer::nn::cpu {

namespace {

template <typename T>
void forward_rows(double* row_loss, float* stats, const T* logits, const int32_t* targets,
                  int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    row_loss[n] = 0.0;
    if (targets[n] < 0) continue;
    const T* row = logits + n * V;
    float mx = -__builtin_inff();
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < V; ++i) mx = load(row[i]) > mx ? load(row[i]) : mx;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < V; ++i) sum += vec_exp(load(row[i]) - mx);
    const float log_sum = __builtin_logf(sum);
    stats[2 * n] = mx;
    stats[2 * n + 1] = log_sum;
    // -log p = (max - logit) + log(sum exp(x - max)): exact in double for any finite logits.
    row_loss[n] = (double(mx) - double(load(row[targets[n]]))) + double(log_sum);
  }
}

template <typename T>
void backward_rows(T* dlogits, const T* logits, const float* stats, const int32_t* targets,
                   int64_t N, int64_t V, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T* d = dlogits + n * V;
    if (targets[n] < 0) {
#pragma omp simd
      for (int64_t i = 0; i < V; ++i) store(d[i], 0.0f);
      continue;
    }
    const T* row = logits + n * V;
    const float mx = stats[2 * n], log_sum = stats[2 * n + 1];
    const float target_p = vec_exp((load(row[targets[n]]) - mx) - log_sum);
#pragma omp simd
    for (int64_t i = 0; i < V; ++i) store(d[i], scale * vec_exp((load(row[i]) - mx) - log_sum));
    store(d[targets[n]], scale * (target_p - 1.0f));
  }
}

}  // namespace

void cross_entropy_forward(const Context& ctx, const Tensor& loss_sum, const Tensor& stats,
                           const ConstTensor& logits, const ConstTensor& targets) {
  const int64_t N = logits.rows(), V = logits.cols();
  Workspace::Scope scratch(ctx.workspace);
  double* row_loss = scratch.take<double>(N);
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows(row_loss, stats.as<float>(), logits.as<T>(), targets.as<int32_t>(), N, V);
  });
  double sum = 0;  // in row order: deterministic
  for (int64_t n = 0; n < N; ++n) sum += row_loss[n];
  loss_sum.as<double>()[0] += sum;
}

void cross_entropy_backward(const Context& ctx, const Tensor& dlogits, const ConstTensor& logits,
                            const ConstTensor& stats, const ConstTensor& targets,
                            const ConstTensor& scale) {
  const int64_t N = logits.rows(), V = logits.cols();
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_rows(dlogits.as<T>(), logits.as<T>(), stats.as<float>(), targets.as<int32_t>(), N, V,
                  scale.as<float>()[0]);
  });
}

size_t cross_entropy_workspace(const Context&, int64_t N) {
  return Workspace::bytes_for<double>(N);
}

}  // namespace trainer::nn::cpu
