#include "nn/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "nn/ops/embedding.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "runtime/error.h"
#include "runtime/gemm.h"

namespace trainer::nn {

KvCacheDecoder::KvCacheDecoder(const GPT& model) : model_(model) {
  const ModelConfig& c = model.config();
  const size_t C = size_t(c.n_embd), P = size_t(c.max_seq_len);
  k_.resize(size_t(c.n_layer) * P * C);
  v_.resize(size_t(c.n_layer) * P * C);
  x_.resize(C);
  ln_.resize(C);
  qkv_.resize(3 * C);
  att_.resize(C);
  tmp_.resize(C);
  fc_.resize(4 * C);
  fc_gelu_.resize(4 * C);
  logits_.resize(size_t(c.vocab_size));
  scores_.resize(P);
}

const float* KvCacheDecoder::push(int32_t token) {
  const ModelConfig& c = model_.config();
  const ParamLayout& lay = model_.layout();
  const float* p = model_.params();
  const int C = c.n_embd, H = c.n_head, hs = c.head_size(), P = c.max_seq_len;
  CHECK(length_ < P, "the sequence is full ({} positions, model.max_seq_len)", P);
  const int32_t pos = length_;
  embedding_forward(x_.data(), &token, &pos, p + lay.wte(), p + lay.wpe(), 1, C, c.vocab_size, P);
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int l = 0; l < c.n_layer; ++l) {
    const BlockParams& w = lay.block(l);
    float* kc = k_.data() + size_t(l) * P * C;
    float* vc = v_.data() + size_t(l) * P * C;
    layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), p + w.ln1_w, p + w.ln1_b, 1, C);
    linear_forward(qkv_.data(), ln_.data(), p + w.qkv_w, p + w.qkv_b, 1, C, 3 * C);
    std::copy_n(qkv_.data() + C, C, kc + size_t(pos) * C);
    std::copy_n(qkv_.data() + 2 * C, C, vc + size_t(pos) * C);
    for (int h = 0; h < H; ++h) {  // one query against every cached key of this head
      const float* q = qkv_.data() + h * hs;
      float mx = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        const float* k = kc + size_t(j) * C + h * hs;
        float s = 0;
        for (int d = 0; d < hs; ++d) s += q[d] * k[d];
        scores_[size_t(j)] = s * scale;
        mx = std::max(mx, scores_[size_t(j)]);
      }
      float z = 0;
      for (int j = 0; j <= pos; ++j) z += (scores_[size_t(j)] = std::exp(scores_[size_t(j)] - mx));
      float* o = att_.data() + h * hs;
      std::fill(o, o + hs, 0.0f);
      for (int j = 0; j <= pos; ++j) {
        const float* v = vc + size_t(j) * C + h * hs;
        const float a = scores_[size_t(j)] / z;
        for (int d = 0; d < hs; ++d) o[d] += a * v[d];
      }
    }
    linear_forward(tmp_.data(), att_.data(), p + w.proj_w, p + w.proj_b, 1, C, C);
    residual_forward(x_.data(), x_.data(), tmp_.data(), C);
    layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), p + w.ln2_w, p + w.ln2_b, 1, C);
    linear_forward(fc_.data(), ln_.data(), p + w.fc_w, p + w.fc_b, 1, C, 4 * C);
    gelu_forward(fc_gelu_.data(), fc_.data(), 4 * C);
    linear_forward(tmp_.data(), fc_gelu_.data(), p + w.fcproj_w, p + w.fcproj_b, 1, 4 * C, C);
    residual_forward(x_.data(), x_.data(), tmp_.data(), C);
  }
  layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), p + lay.lnf_w(), p + lay.lnf_b(), 1, C);
  gemm(false, true, 1, c.vocab_size, C, 1.0f, ln_.data(), C, p + lay.wte(), C, 0.0f, logits_.data(),
       c.vocab_size);
  ++length_;
  return logits_.data();
}

}  // namespace trainer::nn
