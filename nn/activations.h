// Where every activation of one forward/backward lives: offsets into one buffer sized from
// (config, max batch rows, max row length) before the first step, so the step loop allocates
// nothing and `trainer plan` reports exactly what is allocated.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/model_config.h"

namespace trainer::nn {

// Per-block saved tensors, offsets in floats. N = B*T rows.
struct BlockActs {
  int64_t ln1, ln1_mean, ln1_rstd;  // (N,C) (N) (N)
  int64_t qkv;                      // (N,3C)
  int64_t atty, lse;                // (N,C) (B,H,T)
  int64_t res_mid;                  // (N,C) residual stream after attention
  int64_t ln2, ln2_mean, ln2_rstd;  // (N,C) (N) (N)
  int64_t fch, fch_gelu;            // (N,4C) (N,4C)
};

struct ActivationLayout {
  ActivationLayout(const ModelConfig& config, int max_rows, int max_seq_len);

  int max_rows, max_seq_len;
  std::vector<int64_t> residual;  // L+1 entries: block inputs, then the last block's output
  std::vector<BlockActs> blocks;
  int64_t lnf, lnf_mean, lnf_rstd;  // (N,C) (N) (N)
  int64_t logits;                   // (N,V): logits, then probabilities, then their gradient
  int64_t scratch;                  // (N,C) branch outputs before the residual add
  // Backward scratch, reused by every block.
  int64_t d_res, d_ln;        // (N,C) (N,C)
  int64_t d_qkv;              // (N,3C)
  int64_t d_atty;             // (N,C)
  int64_t d_fch, d_fch_gelu;  // (N,4C) (N,4C)
  int64_t total_floats;

  int64_t bytes() const { return total_floats * int64_t(sizeof(float)); }
};

}  // namespace trainer::nn
