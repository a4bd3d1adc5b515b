#include "nn/adamw.h"

#include <algorithm>

#include "nn/ops/adamw.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::nn {

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config, int64_t begin, int64_t end,
             const std::function<bool(const std::string&)>& frozen, Device device)
    : config_(config), begin_(begin), end_(end) {
  TRAINER_ASSERT(0 <= begin && begin <= end && end <= layout.total(), "optimizer range [{}, {})",
                 begin, end);
  for (const ParamInfo& p : layout.params()) {
    const int64_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (b >= e || (frozen && frozen(p.name))) continue;
    const bool embedding = layout.units()[size_t(p.unit)].kind == UnitKind::embedding;
    spans_.push_back({b, e, state_size_, p.decay || (config.decay_embeddings && embedding)});
    state_size_ += e - b;
  }
  m_ = Buffer(size_t(state_size_) * sizeof(float), device);
  v_ = Buffer(size_t(state_size_) * sizeof(float), device);
}

Tensor AdamW::moments(const Buffer& b, const Span& s) const {
  return b.view(DType::f32, state_size_).flat(s.state, s.end - s.begin);
}

void AdamW::step(const Context& ctx, const Tensor& params, const Tensor& grads,
                 const Tensor& working, float lr, float grad_scale) {
  ++step_;
  AdamWHyper h{.lr = lr,
               .beta1 = config_.beta1,
               .beta2 = config_.beta2,
               .eps = config_.eps,
               .weight_decay = 0,
               .grad_scale = grad_scale,
               .step = step_};
  for (const Span& s : spans_) {
    const int64_t n = s.end - s.begin;
    h.weight_decay = s.decay ? config_.weight_decay : 0.0f;
    adamw_update(ctx, params.flat(s.begin, n), grads.flat(s.begin, n), moments(m_, s),
                 moments(v_, s), working.empty() ? Tensor{} : working.flat(s.begin, n), h);
  }
}

void AdamW::export_moments(float* m_flat, float* v_flat) const {
  std::fill(m_flat, m_flat + (end_ - begin_), 0.0f);
  std::fill(v_flat, v_flat + (end_ - begin_), 0.0f);
  const Context ctx;
  for (const Span& s : spans_) {
    const int64_t n = s.end - s.begin;
    copy(ctx, make_tensor(m_flat + (s.begin - begin_), DType::f32, {n}), moments(m_, s));
    copy(ctx, make_tensor(v_flat + (s.begin - begin_), DType::f32, {n}), moments(v_, s));
  }
}

void AdamW::import_moments(const float* m_flat, const float* v_flat) {
  const Context ctx;
  for (const Span& s : spans_) {
    const int64_t n = s.end - s.begin;
    copy(ctx, moments(m_, s), make_tensor(m_flat + (s.begin - begin_), DType::f32, {n}));
    copy(ctx, moments(v_, s), make_tensor(v_flat + (s.begin - begin_), DType::f32, {n}));
  }
}

float clip_scale(double norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  return float(std::min(1.0, double(max_norm) / (norm + 1e-6)));
}

}  // namespace trainer::nn
