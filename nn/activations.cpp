#include "nn/activations.h"

namespace trainer::nn {

ActivationLayout::ActivationLayout(const ModelConfig& cfg, int rows, int seq)
    : max_rows(rows), max_seq_len(seq) {
  const int64_t N = int64_t(rows) * seq, C = cfg.n_embd, V = cfg.vocab_size;
  int64_t next = 0;
  auto take = [&next](int64_t floats) {
    int64_t at = next;
    next += (floats + 15) / 16 * 16;
    return at;
  };
  for (int l = 0; l <= cfg.n_layer; ++l) residual.push_back(take(N * C));
  for (int l = 0; l < cfg.n_layer; ++l) {
    BlockActs a;
    a.ln1 = take(N * C);
    a.ln1_mean = take(N);
    a.ln1_rstd = take(N);
    a.qkv = take(N * 3 * C);
    a.atty = take(N * C);
    a.lse = take(N * cfg.n_head);
    a.res_mid = take(N * C);
    a.ln2 = take(N * C);
    a.ln2_mean = take(N);
    a.ln2_rstd = take(N);
    a.fch = take(N * 4 * C);
    a.fch_gelu = take(N * 4 * C);
    blocks.push_back(a);
  }
  lnf = take(N * C);
  lnf_mean = take(N);
  lnf_rstd = take(N);
  logits = take(N * V);
  scratch = take(N * C);
  d_res = take(N * C);
  d_ln = take(N * C);
  d_qkv = take(N * 3 * C);
  d_atty = take(N * C);
  d_fch = take(N * 4 * C);
  d_fch_gelu = take(N * 4 * C);
  total_floats = next;
}

}  // namespace trainer::nn
