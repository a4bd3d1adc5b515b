#include "nn/gpt.h"

#include <cmath>

#include "nn/ops/attention.h"
#include "nn/ops/embedding.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"
#include "runtime/rng.h"

namespace trainer::nn {

GPT::GPT(const ModelConfig& config, int max_rows, int max_seq_len)
    : config_(config),
      layout_(config),
      acts_layout_(config, max_rows, max_seq_len),
      params_(size_t(layout_.total()) * sizeof(float)),
      grads_(size_t(layout_.total()) * sizeof(float)),
      acts_(size_t(acts_layout_.bytes())) {
  CHECK(max_seq_len <= config.max_seq_len, "sequence length {} exceeds model.max_seq_len {}",
        max_seq_len, config.max_seq_len);
  const size_t N = size_t(max_rows) * max_seq_len;
  tokens_.resize(N);
  targets_.resize(N);
  positions_.resize(N);
  segments_.resize(N);
  lengths_.resize(N);  // rows can reach N: bucket batches trade row length for rows
}

void GPT::init_weights(uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.0f * float(config_.n_layer));
  for (const ParamInfo& p : layout_.params()) {
    float* w = params() + p.offset;
    const std::string& n = p.name;
    auto ends_with = [&n](const char* s) { return n.ends_with(s); };
    if (ends_with(".bias")) {
      std::fill(w, w + p.numel, 0.0f);
    } else if (ends_with("ln_1.weight") || ends_with("ln_2.weight") || n == "ln_f.weight") {
      std::fill(w, w + p.numel, 1.0f);
    } else {
      bool residual = ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight");
      fill_normal(w, p.numel, seed ^ hash64(n), 0.0f, residual ? residual_std : 0.02f);
    }
  }
}

void GPT::zero_grads() {
  PROFILE_SCOPE("zero_grads");
  grads_.zero();
}

void GPT::prepare_inputs(const BatchView& b) {
  CHECK(b.B > 0 && b.T > 0, "empty batch ({} x {})", b.B, b.T);
  CHECK(int64_t(b.B) * b.T <= int64_t(acts_layout_.max_rows) * acts_layout_.max_seq_len &&
            b.T <= acts_layout_.max_seq_len,
        "batch {} x {} exceeds the {} x {} the model was sized for", b.B, b.T,
        acts_layout_.max_rows, acts_layout_.max_seq_len);
  B_ = b.B;
  T_ = b.T;
  const int64_t N = int64_t(B_) * T_;
  std::copy(b.tokens, b.tokens + N, tokens_.begin());
  has_targets_ = b.targets != nullptr;
  if (has_targets_) std::copy(b.targets, b.targets + N, targets_.begin());
  if (b.segments) std::copy(b.segments, b.segments + N, segments_.begin());
  if (b.lengths) std::copy(b.lengths, b.lengths + B_, lengths_.begin());
  // Positions count from each row's start, restarting where the segment id changes.
  for (int r = 0; r < B_; ++r)
    for (int t = 0; t < T_; ++t) {
      int64_t i = int64_t(r) * T_ + t;
      bool restart = t == 0 || (b.segments && b.segments[i] != b.segments[i - 1]);
      positions_[i] = restart ? 0 : positions_[i - 1] + 1;
    }
  segments_active_ = b.segments != nullptr;
  lengths_active_ = b.lengths != nullptr;
}

AttentionMask GPT::mask() const {
  return {segments_active_ ? segments_.data() : nullptr,
          lengths_active_ ? lengths_.data() : nullptr};
}

LossSum GPT::forward(const BatchView& batch) {
  prepare_inputs(batch);
  const int64_t N = int64_t(B_) * T_;
  const int C = config_.n_embd, V = config_.vocab_size;
  const float* p = params();
  embedding_forward(act(acts_layout_.residual[0]), tokens_.data(), positions_.data(),
                    p + layout_.wte(), p + layout_.wpe(), N, C, V, config_.max_seq_len);
  for (int l = 0; l < config_.n_layer; ++l) forward_block(l, N);
  const ActivationLayout& a = acts_layout_;
  layernorm_forward(act(a.lnf), act(a.lnf_mean), act(a.lnf_rstd),
                    act(a.residual[size_t(config_.n_layer)]), p + layout_.lnf_w(),
                    p + layout_.lnf_b(), N, C);
  // logits(N,V) = lnf(N,C) @ wte(V,C)^T: the head is tied to the token embedding.
  {
    PROFILE_SCOPE("lm_head_forward");
    gemm(false, true, N, V, C, 1.0f, act(a.lnf), C, p + layout_.wte(), C, 0.0f, act(a.logits),
         V);
  }
  if (!has_targets_) return {};
  return cross_entropy_forward(act(a.logits), targets_.data(), N, V);
}

void GPT::forward_block(int l, int64_t N) {
  const int C = config_.n_embd;
  const BlockParams& w = layout_.block(l);
  const BlockActs& a = acts_layout_.blocks[size_t(l)];
  const float* p = params();
  float* x = act(acts_layout_.residual[size_t(l)]);
  float* tmp = act(acts_layout_.scratch);
  layernorm_forward(act(a.ln1), act(a.ln1_mean), act(a.ln1_rstd), x, p + w.ln1_w, p + w.ln1_b, N,
                    C);
  linear_forward(act(a.qkv), act(a.ln1), p + w.qkv_w, p + w.qkv_b, N, C, 3 * C);
  attention_forward(act(a.atty), act(a.lse), act(a.qkv), mask(), {B_, T_, C, config_.n_head});
  linear_forward(tmp, act(a.atty), p + w.proj_w, p + w.proj_b, N, C, C);
  residual_forward(act(a.res_mid), x, tmp, N * C);
  layernorm_forward(act(a.ln2), act(a.ln2_mean), act(a.ln2_rstd), act(a.res_mid), p + w.ln2_w,
                    p + w.ln2_b, N, C);
  linear_forward(act(a.fch), act(a.ln2), p + w.fc_w, p + w.fc_b, N, C, 4 * C);
  gelu_forward(act(a.fch_gelu), act(a.fch), N * 4 * C);
  linear_forward(tmp, act(a.fch_gelu), p + w.fcproj_w, p + w.fcproj_b, N, 4 * C, C);
  residual_forward(act(acts_layout_.residual[size_t(l) + 1]), act(a.res_mid), tmp, N * C);
}

void GPT::backward(float loss_scale) {
  CHECK(has_targets_, "backward needs a forward pass with targets");
  const int64_t N = int64_t(B_) * T_;
  const int C = config_.n_embd, V = config_.vocab_size, L = config_.n_layer;
  const ActivationLayout& a = acts_layout_;
  const float* p = params();
  float* g = grads();
  float* dlogits = act(a.logits);
  cross_entropy_backward(dlogits, targets_.data(), N, V, loss_scale);
  // Through the tied head: d lnf = dlogits @ wte; d wte += dlogits^T @ lnf.
  float* d_ln = act(a.d_ln);
  {
    PROFILE_SCOPE("lm_head_backward");
    gemm(false, false, N, C, V, 1.0f, dlogits, V, p + layout_.wte(), C, 0.0f, d_ln, C);
    gemm(true, false, V, C, N, 1.0f, dlogits, V, act(a.lnf), C, 1.0f, g + layout_.wte(), C);
  }
  float* d_res = act(a.d_res);
  std::fill(d_res, d_res + N * C, 0.0f);
  layernorm_backward(d_res, g + layout_.lnf_w(), g + layout_.lnf_b(), d_ln,
                     act(a.residual[size_t(L)]), p + layout_.lnf_w(), act(a.lnf_mean),
                     act(a.lnf_rstd), N, C);
  if (on_grads_ready) on_grads_ready(layout_.lnf_w(), layout_.total());
  for (int l = L - 1; l >= 0; --l) {
    backward_block(l, N);
    if (on_grads_ready) on_grads_ready(layout_.block(l).begin, layout_.block(l).end);
  }
  embedding_backward(g + layout_.wte(), g + layout_.wpe(), d_res, tokens_.data(), positions_.data(),
                     N, C);
  if (on_grads_ready) on_grads_ready(0, layout_.block(0).begin);
}

// On entry d_res holds the gradient of the block's output; on exit, of its input.
void GPT::backward_block(int l, int64_t N) {
  const int C = config_.n_embd;
  const BlockParams& w = layout_.block(l);
  const BlockActs& a = acts_layout_.blocks[size_t(l)];
  const ActivationLayout& al = acts_layout_;
  const float* p = params();
  float* g = grads();
  float* d_res = act(al.d_res);
  float* d_ln = act(al.d_ln);
  // MLP branch.
  linear_backward(act(al.d_fch_gelu), g + w.fcproj_w, g + w.fcproj_b, d_res, act(a.fch_gelu),
                  p + w.fcproj_w, N, 4 * C, C);
  gelu_backward(act(al.d_fch), act(al.d_fch_gelu), act(a.fch), N * 4 * C);
  linear_backward(d_ln, g + w.fc_w, g + w.fc_b, act(al.d_fch), act(a.ln2), p + w.fc_w, N, C, 4 * C);
  layernorm_backward(d_res, g + w.ln2_w, g + w.ln2_b, d_ln, act(a.res_mid), p + w.ln2_w,
                     act(a.ln2_mean), act(a.ln2_rstd), N, C);
  // Attention branch.
  linear_backward(act(al.d_atty), g + w.proj_w, g + w.proj_b, d_res, act(a.atty), p + w.proj_w, N,
                  C, C);
  attention_backward(act(al.d_qkv), act(al.d_atty), act(a.atty), act(a.lse), act(a.qkv), mask(),
                     {B_, T_, C, config_.n_head});
  linear_backward(d_ln, g + w.qkv_w, g + w.qkv_b, act(al.d_qkv), act(a.ln1), p + w.qkv_w, N, C,
                  3 * C);
  layernorm_backward(d_res, g + w.ln1_w, g + w.ln1_b, d_ln, act(al.residual[size_t(l)]),
                     p + w.ln1_w, act(a.ln1_mean), act(a.ln1_rstd), N, C);
}

}  // namespace trainer::nn
