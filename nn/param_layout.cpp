#include "nn/param_layout.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace trainer::nn {

ParamLayout::ParamLayout(const ModelConfig& cfg) {
  cfg.validate();
  const ArchSpec spec = arch_spec(cfg);
  add_unit(UnitKind::embedding, spec.embedding, "", spec, cfg.n_layer);
  for (int l = 0; l < cfg.n_layer; ++l)
    add_unit(UnitKind::block, spec.block, spec.block_prefix + std::to_string(l) + ".", spec,
             cfg.n_layer);
  add_unit(UnitKind::final, spec.final, "", spec, cfg.n_layer);
}

void ParamLayout::add_unit(UnitKind kind, const std::vector<ParamSpec>& specs,
                           const std::string& prefix, const ArchSpec& spec, int n_layer) {
  // GPT-2's rule: a projection onto the residual stream starts 1/sqrt(2L) smaller.
  const float residual_std = spec.init_std / std::sqrt(2.0f * float(n_layer));
  Unit u{kind, total_, total_, {}};
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
    p.role = s.role;
    p.hf_rows = s.hf_rows;
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
    for (int64_t d : p.shape) s += "," + std::to_string(d);
    s += ";";
  }
  return hash64(s);
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
      fill_normal(out, begin, end, seed ^ hash64(p.name), 0.0f, p.init_std);
      break;
  }
}

}  // namespace trainer::nn
