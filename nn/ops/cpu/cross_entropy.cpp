#include <cmath>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/cpu/vec_math.h"
#include "nn/ops/kernels.h"
#include "runtime/workspace.h"

namespace trainer::nn::cpu {

namespace {

// Each row's maximum and log-sum-exp in one pass over it, a chunk of kChunk logits at a time
// (2 KiB of fp32, still in L1 when its exponentials are taken): the chunk's maximum, the sum so
// far rescaled where it raises the running maximum, then the chunk's exponentials. A row
// streams from memory once, and the exponentials (the op's arithmetic) overlap the stream,
// which a pass for the maximum and then one for the sum left serial.
constexpr int64_t kChunk = 512;

template <typename T>
inline void row_stats(float* stats, const T* row, int64_t V) {
  float mx = -__builtin_inff(), sum = 0;
  for (int64_t b = 0; b < V; b += kChunk) {
    const int64_t e = b + kChunk < V ? b + kChunk : V;
    float cm = mx;
#pragma omp simd reduction(max : cm)
    for (int64_t i = b; i < e; ++i) cm = load(row[i]) > cm ? load(row[i]) : cm;
    if (cm == -__builtin_inff()) {  // every logit here is -inf, adding nothing, or NaN
      for (int64_t i = b; i < e; ++i)
        if (std::isnan(load(row[i]))) sum = __builtin_nanf("");
      continue;
    }
    if (cm > mx) {
      sum *= vec_exp(mx - cm);
      mx = cm;
    }
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) s += vec_exp(load(row[i]) - mx);
    sum += s;
  }
  stats[0] = mx;
  stats[1] = __builtin_logf(sum);
}

template <typename T>
void stats_rows(float* stats, const T* logits, const int32_t* targets, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] >= 0) row_stats(stats + 2 * n, logits + n * V, V);
}

template <typename T>
void backward_rows(T* dlogits, const T* logits, const float* stats, const int32_t* targets,
                   int64_t N, int64_t V, float scale, int64_t vocab_begin) {
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
    const int64_t t = targets[n] - vocab_begin;
    const bool here = t >= 0 && t < V;
    const float target_p = here ? vec_exp((load(row[t]) - mx) - log_sum) : 0.0f;
#pragma omp simd
    for (int64_t i = 0; i < V; ++i) store(d[i], scale * vec_exp((load(row[i]) - mx) - log_sum));
    if (here) store(d[t], scale * (target_p - 1.0f));
  }
}

}  // namespace

void cross_entropy_stats(const Context&, const Tensor& stats, const ConstTensor& logits,
                         const ConstTensor& targets) {
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    stats_rows(stats.as<float>(), logits.as<T>(), targets.as<int32_t>(), logits.rows(),
               logits.cols());
  });
}

void cross_entropy_merge_stats(const Context&, const Tensor& stats, const ConstTensor& parts,
                               const ConstTensor& targets) {
  const int64_t N = targets.numel(), R = parts.numel() / (2 * N);
  const float* p = parts.as<float>();
  const int32_t* tg = targets.as<int32_t>();
  float* out = stats.as<float>();
  for (int64_t n = 0; n < N; ++n) {
    if (tg[n] < 0) continue;
    float mx = -__builtin_inff();
    for (int64_t r = 0; r < R; ++r) mx = std::max(mx, p[(r * N + n) * 2]);
    float sum = 0;  // each slice's sum of exp(x - its max), rescaled to the common max
    for (int64_t r = 0; r < R; ++r)
      sum += std::exp(p[(r * N + n) * 2 + 1] + (p[(r * N + n) * 2] - mx));
    out[2 * n] = mx;
    out[2 * n + 1] = std::log(sum);
  }
}

void cross_entropy_loss(const Context&, const Tensor& loss_sum, const ConstTensor& logits,
                        const ConstTensor& stats, const ConstTensor& targets, int64_t vocab_begin) {
  const int64_t N = logits.rows(), V = logits.cols();
  const int32_t* tg = targets.as<int32_t>();
  const float* st = stats.as<float>();
  double sum = 0;  // in row order: deterministic
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.as<T>();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = tg[n] - vocab_begin;
      if (tg[n] < 0 || t < 0 || t >= V) continue;
      // -log p = (max - logit) + log(sum exp(x - max)): exact in double for any finite logits.
      sum += (double(st[2 * n]) - double(load(x[n * V + t]))) + double(st[2 * n + 1]);
    }
  });
  loss_sum.as<double>()[0] += sum;
}

void cross_entropy_backward(const Context&, const Tensor& dlogits, const ConstTensor& logits,
                            const ConstTensor& stats, const ConstTensor& targets,
                            const ConstTensor& scale, int64_t vocab_begin) {
  const int64_t N = logits.rows(), V = logits.cols();
  with_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_rows(dlogits.as<T>(), logits.as<T>(), stats.as<float>(), targets.as<int32_t>(), N, V,
                  scale.as<float>()[0], vocab_begin);
  });
}

size_t cross_entropy_workspace(const Context&, int64_t) {
  return 0;
}

}  // namespace trainer::nn::cpu
