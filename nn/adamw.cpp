#include "nn/adamw.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/profile.h"

namespace trainer::nn {

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config, int64_t begin, int64_t end,
             const std::function<bool(const std::string&)>& frozen)
    : config_(config), begin_(begin), end_(end) {
  CHECK(0 <= begin && begin <= end && end <= layout.total(), "bad optimizer range [{}, {})", begin,
        end);
  for (const ParamInfo& p : layout.params()) {
    int64_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (b >= e || (frozen && frozen(p.name))) continue;
    bool decay = p.decay || (config.decay_embeddings && p.block == -1);
    spans_.push_back({b, e, state_size_, decay});
    state_size_ += e - b;
  }
  m_ = Buffer(size_t(state_size_) * sizeof(float));
  v_ = Buffer(size_t(state_size_) * sizeof(float));
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale) {
  PROFILE_SCOPE("adamw_step");
  ++step_;
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  const float bc1 = 1.0f - std::pow(b1, float(step_));
  const float bc2 = 1.0f - std::pow(b2, float(step_));
  const float step_size = lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  float* m = this->m();
  float* v = this->v();
  for (const Span& s : spans_) {
    const float decay = s.decay ? 1.0f - lr * config_.weight_decay : 1.0f;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = s.begin; i < s.end; ++i) {
      float g = grads[i] * grad_scale;
      int64_t j = s.state + (i - s.begin);
      float mi = b1 * m[j] + (1.0f - b1) * g;
      float vi = b2 * v[j] + (1.0f - b2) * g * g;
      m[j] = mi;
      v[j] = vi;
      params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
  }
}

void AdamW::export_moments(float* m_flat, float* v_flat) const {
  std::fill(m_flat, m_flat + (end_ - begin_), 0.0f);
  std::fill(v_flat, v_flat + (end_ - begin_), 0.0f);
  for (const Span& s : spans_) {
    std::copy_n(m_.as<float>() + s.state, s.end - s.begin, m_flat + (s.begin - begin_));
    std::copy_n(v_.as<float>() + s.state, s.end - s.begin, v_flat + (s.begin - begin_));
  }
}

void AdamW::import_moments(const float* m_flat, const float* v_flat) {
  for (const Span& s : spans_) {
    std::copy_n(m_flat + (s.begin - begin_), s.end - s.begin, m() + s.state);
    std::copy_n(v_flat + (s.begin - begin_), s.end - s.begin, v() + s.state);
  }
}

double sum_squares(const float* x, int64_t n) {
  // Fixed chunks summed in order: the same bits whatever the thread count or schedule.
  constexpr int64_t kChunks = 256;
  double partial[kChunks];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < kChunks; ++c) {
    double s = 0;
    for (int64_t i = n * c / kChunks; i < n * (c + 1) / kChunks; ++i) s += double(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

float clip_scale(double norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  return float(std::min(1.0, double(max_norm) / (norm + 1e-6)));
}

}  // namespace trainer::nn
