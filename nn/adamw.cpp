#include "nn/adamw.h"

#include <algorithm>

#include "nn/ops/adamw.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::nn {

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config, std::vector<FlatSlice> slices,
             const std::function<bool(const std::string&)>& frozen, Device device)
    : config_(config), slices_(std::move(slices)) {
  for (const FlatSlice& sl : slices_) {
    TRAINER_ASSERT(0 <= sl.begin && sl.begin <= sl.end && sl.end <= layout.total() && sl.local >= 0,
                   "optimizer slice [{}, {})", sl.begin, sl.end);
    for (const ParamInfo& p : layout.params()) {
      const int64_t b = std::max(sl.begin, p.offset), e = std::min(sl.end, p.offset + p.numel);
      if (b >= e || (frozen && frozen(p.name))) continue;
      const bool embedding = layout.units()[size_t(p.unit)].kind == UnitKind::embedding;
      spans_.push_back({b, e, sl.local + (b - sl.begin), state_size_,
                        p.decay || (config.decay_embeddings && embedding)});
      state_size_ += e - b;
    }
  }
  m_ = Buffer(size_t(state_size_) * sizeof(float), device, MemoryUse::optimizer);
  v_ = Buffer(size_t(state_size_) * sizeof(float), device, MemoryUse::optimizer);
}

int64_t AdamW::state_size_of(const ParamLayout& layout, const std::vector<FlatSlice>& slices,
                             const std::function<bool(const std::string&)>& frozen) {
  int64_t n = 0;
  for (const FlatSlice& sl : slices)
    for (const ParamInfo& p : layout.params()) {
      const int64_t b = std::max(sl.begin, p.offset), e = std::min(sl.end, p.offset + p.numel);
      if (b < e && !(frozen && frozen(p.name))) n += e - b;
    }
  return n;
}

int64_t AdamW::local_size() const {
  int64_t n = 0;
  for (const FlatSlice& sl : slices_) n = std::max(n, sl.local + sl.size());
  return n;
}

Tensor AdamW::moments(const Buffer& b, const Span& s) const {
  return b.view(DType::f32, state_size_).flat(s.state, s.end - s.begin);
}

void AdamW::step(const Context& ctx, const Tensor& params, const ConstTensor& grads,
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
    adamw_update(ctx, params.flat(s.local, n), grads.flat(s.local, n), moments(m_, s),
                 moments(v_, s), working.empty() ? Tensor{} : working.flat(s.local, n), h);
  }
}

// Calls fn(span, [b, e)) for the part of every span inside [begin, end).
template <class Fn>
void AdamW::for_spans_in(int64_t begin, int64_t end, Fn fn) const {
  for (const Span& s : spans_) {
    const int64_t b = std::max(begin, s.begin), e = std::min(end, s.end);
    if (b < e) fn(s, b, e);
  }
}

void AdamW::export_moments(const Context& ctx, int64_t begin, int64_t end, float* m,
                           float* v) const {
  std::fill(m, m + (end - begin), 0.0f);
  std::fill(v, v + (end - begin), 0.0f);
  for_spans_in(begin, end, [&](const Span& s, int64_t b, int64_t e) {
    const Tensor ms = moments(m_, s).flat(b - s.begin, e - b),
                 vs = moments(v_, s).flat(b - s.begin, e - b);
    copy(ctx, make_tensor(m + (b - begin), DType::f32, {e - b}), ms);
    copy(ctx, make_tensor(v + (b - begin), DType::f32, {e - b}), vs);
  });
}

void AdamW::import_moments(const Context& ctx, int64_t begin, int64_t end, const float* m,
                           const float* v) {
  for_spans_in(begin, end, [&](const Span& s, int64_t b, int64_t e) {
    copy(ctx, moments(m_, s).flat(b - s.begin, e - b),
         make_tensor(m + (b - begin), DType::f32, {e - b}));
    copy(ctx, moments(v_, s).flat(b - s.begin, e - b),
         make_tensor(v + (b - begin), DType::f32, {e - b}));
  });
}

float clip_scale(double norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  return float(std::min(1.0, double(max_norm) / (norm + 1e-6)));
}

}  // namespace trainer::nn
