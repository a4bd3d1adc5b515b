#include "nn/param_layout.h"

#include "runtime/error.h"
#include "runtime/rng.h"

namespace trainer::nn {

void ModelConfig::validate() const {
  CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
  CHECK(max_seq_len > 0, "model.max_seq_len must be positive, got {}", max_seq_len);
  CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  CHECK(n_embd > 0 && n_embd % n_head == 0,
        "model.n_embd ({}) must be a positive multiple of model.n_head ({})", n_embd, n_head);
}

int64_t ModelConfig::matmul_params() const {
  int64_t C = n_embd;
  return int64_t(vocab_size) * C + int64_t(n_layer) * (12 * C * C);
}

double ModelConfig::flops_per_token(int seq_len) const {
  return 6.0 * double(matmul_params()) + 12.0 * n_layer * n_embd * double(seq_len);
}

ParamLayout::ParamLayout(const ModelConfig& cfg) {
  cfg.validate();
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, P = cfg.max_seq_len;
  wte_ = add("wte.weight", {V, C}, false, -1);
  wpe_ = add("wpe.weight", {P, C}, false, -1);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    BlockParams b;
    b.begin = total_;
    b.ln1_w = add(h + "ln_1.weight", {C}, false, l);
    b.ln1_b = add(h + "ln_1.bias", {C}, false, l);
    b.qkv_w = add(h + "attn.c_attn.weight", {C, 3 * C}, true, l);
    b.qkv_b = add(h + "attn.c_attn.bias", {3 * C}, false, l);
    b.proj_w = add(h + "attn.c_proj.weight", {C, C}, true, l);
    b.proj_b = add(h + "attn.c_proj.bias", {C}, false, l);
    b.ln2_w = add(h + "ln_2.weight", {C}, false, l);
    b.ln2_b = add(h + "ln_2.bias", {C}, false, l);
    b.fc_w = add(h + "mlp.c_fc.weight", {C, 4 * C}, true, l);
    b.fc_b = add(h + "mlp.c_fc.bias", {4 * C}, false, l);
    b.fcproj_w = add(h + "mlp.c_proj.weight", {4 * C, C}, true, l);
    b.fcproj_b = add(h + "mlp.c_proj.bias", {C}, false, l);
    b.end = total_;
    blocks_.push_back(b);
  }
  lnf_w_ = add("ln_f.weight", {C}, false, cfg.n_layer);
  lnf_b_ = add("ln_f.bias", {C}, false, cfg.n_layer);
}

int64_t ParamLayout::add(std::string name, std::vector<int64_t> shape, bool decay, int block) {
  ParamInfo p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.numel = 1;
  for (int64_t s : p.shape) p.numel *= s;
  p.offset = total_;
  p.decay = decay;
  p.block = block;
  total_ += (p.numel + 15) / 16 * 16;  // 64-byte aligned tensors
  params_.push_back(p);
  return p.offset;
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return &p;
  return nullptr;
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

}  // namespace trainer::nn
