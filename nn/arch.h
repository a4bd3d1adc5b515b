// An architecture's specification at a model's shape: its parameters (per unit: the
// embedding, one transformer block, the final unit) with shapes, weight decay, initialisation
// and Hugging Face names, its block activations with what the checkpointing policies may drop,
// and its block's matrix products. ParamLayout, ActivationPlan, the workspace and the FLOPs
// count are built from this; an architecture's record (nn/architecture.h) gives it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/model_config.h"

namespace trainer::nn {

// What a parameter is to the code that uses it.
enum class Role : uint8_t {
  tok_embedding,
  pos_embedding,
  norm1_w,
  norm1_b,
  qkv_w,
  qkv_b,
  attn_proj_w,
  attn_proj_b,
  norm2_w,
  norm2_b,
  fc_w,
  fc_b,
  fc_proj_w,
  fc_proj_b,
  final_norm_w,
  final_norm_b,
  q_w,  // the query, key and value projections when separate, adjacent in the flat buffer
  k_w,
  v_w,
  gate_w,  // the SwiGLU gate and up projections, adjacent; the down projection
  up_w,
  down_w,
  lm_head,  // an untied head
  kCount
};

// How a parameter starts: zeros, ones, N(0, init_std), or N(0, init_std / sqrt(2L)) for the
// projections into the residual stream.
enum class Init : uint8_t { zeros, ones, normal, normal_residual };

struct ParamSpec {
  std::string name;  // Hugging Face name; a block's get the prefix "<block_prefix><l>."
  Role role;
  std::vector<int64_t> shape;
  bool decay;  // matrices decay; biases, norms and embeddings do not (by default)
  Init init;
  // Where Hugging Face orders the rows (dim 0) otherwise: rows seen as (a, b, rest) here are
  // (b, a, rest) there. GPT-NeoX keeps q, k, v by head: {3, H} turns [q; k; v] into
  // [q0 k0 v0; q1 k1 v1; ...]. {0, 0}: the same order.
  std::array<int64_t, 2> hf_rows{0, 0};
};

// One matrix product of a block, as (inputs, outputs) per token.
struct Matmul {
  int64_t in, out;
};

// What a block activation is.
enum class Act : uint8_t {
  ln1,
  ln1_mean,
  ln1_rstd,
  qkv,
  atty,
  att_lse,
  res_mid,
  ln2,
  ln2_mean,
  ln2_rstd,
  fch,
  fch_gelu,
  d_qkv,
  d_atty,
  d_fch,
  gate_up,  // the fused gate/up projection (N, 2F) and its SwiGLU (N, F)
  swiglu,
  d_gate_up,
  d_swiglu,
  kCount
};

// cheap: recomputed under selective checkpointing; stat and expensive: kept under selective;
// scratch: backward only, one copy shared by every block. Under full, only scratch exists
// beyond the block's input.
enum class ActKind : uint8_t { cheap, stat, expensive, scratch };

struct ActSpec {
  Act act;
  int64_t per_token;  // elements per token
  bool fp32;          // fp32 whatever the precision (statistics, the residual stream)
  ActKind kind;
};

enum class NormKind : uint8_t { layernorm, rmsnorm };

struct ArchSpec {
  NormKind norm = NormKind::layernorm;  // every norm of the model, the final one included
  std::string block_prefix;
  std::vector<ParamSpec> embedding, block, final;
  std::vector<ActSpec> block_acts;
  std::vector<Matmul> block_matmuls;  // fused products once (Llama's q/k/v is one)
  float init_std = 0.02f;
};

// The specification of `model`'s architecture at its shape (its record's spec).
ArchSpec arch_spec(const ModelConfig& model);

}  // namespace trainer::nn
