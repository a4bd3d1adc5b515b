#include "nn/param_layout.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace trainer::nn {

// A pipeline stage's units keep the whole model's order and contents (Note [Pipeline stages]),
// so each is one range of the whole model's buffer: the same unit's there.
ParamLayout::ParamLayout(const ModelConfig& cfg) : config_(cfg) {
  cfg.validate();
  const ArchSpec spec = arch_spec(cfg);
  std::optional<ParamLayout> all;  // the whole model's layout, for a stage
  if (!cfg.pipeline.whole()) {
    ModelConfig every = cfg;
    every.pipeline = {};
    all.emplace(every);
  }
  auto whole_begin = [&](int unit) { return all ? all->units_[size_t(unit)].begin : total_; };
  block_unit_.assign(size_t(cfg.n_layer), -1);
  has_embedding_ = cfg.holds_embedding_unit();
  if (has_embedding_) add_unit(UnitKind::embedding, spec.embedding, "", spec, cfg, whole_begin(0));
  for (int l : cfg.held_layers()) {
    const int64_t at = whole_begin(1 + l);
    block_unit_[size_t(l)] = int(units_.size());
    add_unit(UnitKind::block, spec.block, spec.block_prefix + std::to_string(l) + ".", spec, cfg,
             at);
    units_.back().layer = l;
  }
  has_final_ = cfg.holds_head();
  if (has_final_)
    add_unit(UnitKind::final, spec.final, "", spec, cfg, whole_begin(cfg.n_layer + 1));
}

void ParamLayout::for_each_whole_range(
    int64_t begin, int64_t end, const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  for (const Unit& u : units_) {
    const int64_t b = std::max(begin, u.begin), e = std::min(end, u.end);
    if (b < e) fn(b, e, u.whole_begin + (b - u.begin));
  }
}

void ParamLayout::add_unit(UnitKind kind, const std::vector<ParamSpec>& specs,
                           const std::string& prefix, const ArchSpec& spec, const ModelConfig& cfg,
                           int64_t whole_begin) {
  const int n_layer = cfg.n_layer;
  // GPT-2's rule: a projection onto the residual stream starts 1/sqrt(2L) smaller.
  const float residual_std = spec.init_std / std::sqrt(2.0f * float(n_layer));
  Unit u{kind, total_, total_, whole_begin, -1, {}};
  u.param.fill(-1);
  for (const ParamSpec& s : specs) {
    ParamInfo p;
    p.name = prefix + s.name;
    p.shape = s.shape;
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.offset = total_;
    p.decay = s.decay;
    p.init = s.init;
    p.init_std = s.init == Init::normal_residual ? residual_std : spec.init_std;
    if (s.init == Init::uniform_fan_in)  // the bound, from the whole tensor's inputs
      p.init_std = 1.0f / std::sqrt(float(s.full_shape.empty() ? s.shape[1] : s.full_shape[1]));
    p.role = s.role;
    p.hf_rows = s.hf_rows;
    p.split = s.split;
    p.full_shape = s.full_shape;
    p.tensor = cfg.tensor;
    p.unit = int(units_.size());
    TRAINER_ASSERT(u.param[size_t(s.role)] < 0, "role {} twice in a unit", int(s.role));
    u.param[size_t(s.role)] = int(params_.size());
    total_ += (p.numel + 15) / 16 * 16;  // 64-byte aligned tensors
    params_.push_back(std::move(p));
  }
  u.end = total_;
  units_.push_back(u);
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamLayout::get(int u, Role role) const {
  TRAINER_ASSERT(u >= 0 && u < int(units_.size()) && has(u, role), "unit {} has no role {}", u,
                 int(role));
  return params_[size_t(units_[size_t(u)].param[size_t(role)])];
}

uint64_t ParamLayout::digest() const {
  std::string s;
  for (const ParamInfo& p : params_) {
    s += p.name + ":" + std::to_string(p.offset);
    for (int64_t d : p.shape) {
      s += ',';  // two appends: GCC 12 at -march=znver3 falsely warns of a huge memcpy in "," + s
      s += std::to_string(d);
    }
    s += ";";
  }
  return hash64(s);
}

ParamLayout ParamLayout::all_layers() const {
  if (config_.pipeline.whole()) return *this;
  ModelConfig all = config_;
  all.pipeline = {};
  return ParamLayout(all);
}

uint64_t ParamLayout::model_digest() const {
  return config_.pipeline.whole() ? digest() : all_layers().digest();
}

int64_t ParamInfo::full_numel() const {
  int64_t n = 1;
  for (int64_t d : full_shape) n *= d;
  return n;
}

void for_each_whole_run(
    const ParamInfo& p, int64_t begin, int64_t end,
    const std::function<void(int64_t local, int64_t whole, int64_t count)>& fn) {
  if (p.split.dim < 0 || p.tensor.degree == 1) {
    if (begin < end) fn(begin, begin, end - begin);
    return;
  }
  // The slice as (outer, D / degree, inner) around the cut dimension; along it, `chunk` rows of
  // each of the `groups` blocks, this rank's piece of each.
  const size_t dim = size_t(p.split.dim);
  int64_t inner = 1;
  for (size_t i = dim + 1; i < p.shape.size(); ++i) inner *= p.shape[i];
  const int64_t D = p.full_shape[dim], Dl = p.shape[dim], chunk = Dl / p.split.groups;
  for (int64_t i = begin; i < end;) {
    const int64_t outer = i / (Dl * inner), j = i % (Dl * inner) / inner, c = i % inner;
    const int64_t group = j / chunk;
    const int64_t run_end = std::min(end, (outer * Dl + (group + 1) * chunk) * inner);
    const int64_t whole_j = group * (D / p.split.groups) + p.tensor.rank * chunk + j % chunk;
    fn(i, (outer * D + whole_j) * inner + c, run_end - i);
    i = run_end;
  }
}

void for_each_slice_run(
    const ParamInfo& p, int degree, int64_t begin, int64_t end,
    const std::function<void(int rank, int64_t local, int64_t whole, int64_t count)>& fn) {
  if (p.split.dim < 0 || degree == 1) {
    if (begin < end) fn(0, begin, begin, end - begin);
    return;
  }
  // The whole tensor as (outer, D, inner) around the cut dimension: D is `groups` blocks of
  // `degree` pieces of `chunk` rows, rank r holding piece r of each block.
  const size_t dim = size_t(p.split.dim);
  int64_t inner = 1;
  for (size_t i = dim + 1; i < p.full_shape.size(); ++i) inner *= p.full_shape[i];
  const int64_t D = p.full_shape[dim], block = D / p.split.groups, chunk = block / degree;
  const int64_t Dl = D / degree;
  for (int64_t i = begin; i < end;) {
    const int64_t outer = i / (D * inner), J = i % (D * inner) / inner, c = i % inner;
    const int64_t group = J / block, rank = J % block / chunk, within = J % chunk;
    const int64_t run_end = std::min(end, (outer * D + group * block + (rank + 1) * chunk) * inner);
    const int64_t local = (outer * Dl + group * chunk + within) * inner + c;
    fn(int(rank), local, i, run_end - i);
    i = run_end;
  }
}

void init_param(const ParamInfo& p, uint64_t seed, float* out) {
  init_param(p, seed, 0, p.numel, out);
}

void init_param(const ParamInfo& p, uint64_t seed, int64_t begin, int64_t end, float* out) {
  switch (p.init) {
    case Init::zeros:
      std::fill(out, out + (end - begin), 0.0f);
      break;
    case Init::ones:
      std::fill(out, out + (end - begin), 1.0f);
      break;
    case Init::normal:
    case Init::normal_residual:
      for_each_whole_run(p, begin, end, [&](int64_t local, int64_t whole, int64_t count) {
        fill_normal(out + (local - begin), whole, whole + count, seed ^ hash64(p.name), 0.0f,
                    p.init_std);
      });
      break;
    case Init::uniform_fan_in:
      for_each_whole_run(p, begin, end, [&](int64_t local, int64_t whole, int64_t count) {
        fill_uniform(out + (local - begin), whole, whole + count, seed ^ hash64(p.name),
                     -p.init_std, p.init_std);
      });
      break;
  }
}

}  // namespace trainer::nn
