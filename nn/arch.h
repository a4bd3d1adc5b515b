// Architectures as data: each names its parameters (per unit: the embedding, one transformer
// block, the final unit) with shapes, weight decay and initialisation, and its block
// activations with what the checkpointing policies may drop. ParamLayout and ActivationPlan are
// built from this; a new architecture adds a specification and its block functions.
#pragma once

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
  q_w,  // llama: the query, key and value projections, adjacent in the flat buffer
  k_w,
  v_w,
  gate_w,  // llama: the SwiGLU gate and up projections, adjacent; the down projection
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
  gate_up,  // llama: the fused gate/up projection (N, 2F) and its SwiGLU (N, F)
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
  float init_std = 0.02f;
};

// The specification of `model`'s architecture at its shape.
ArchSpec arch_spec(const ModelConfig& model);
ArchSpec gpt2_spec(const ModelConfig& model);   // gpt2.cpp
ArchSpec llama_spec(const ModelConfig& model);  // llama.cpp

}  // namespace trainer::nn
