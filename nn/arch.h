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
enum class Role : uint8_t;
// Whether a parameter is a norm's, applied to each token alone (its gradient is a sum over the
// tokens, partial on each rank under sequence parallelism).
constexpr bool is_norm(Role r);

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
  q_b,  // their biases (Qwen2), adjacent too
  k_b,
  v_b,
  q_norm_w,  // RMSNorms of each query and key head (Qwen3), shared by the heads
  k_norm_w,
  gate_w,  // the SwiGLU gate and up projections, adjacent; the down projection
  up_w,
  down_w,
  lm_head,  // an untied head
  // LoRA adapters (Note [LoRA] in nn/lora.h): each target product's A (r, in) and B (out, r).
  lora_q_a,
  lora_q_b,
  lora_k_a,
  lora_k_b,
  lora_v_a,
  lora_v_b,
  lora_o_a,
  lora_o_b,
  lora_gate_a,
  lora_gate_b,
  lora_up_a,
  lora_up_b,
  lora_down_a,
  lora_down_b,
  kCount
};

constexpr bool is_norm(Role r) {
  return r == Role::norm1_w || r == Role::norm1_b || r == Role::norm2_w || r == Role::norm2_b ||
         r == Role::final_norm_w || r == Role::final_norm_b;
}

// Whether a parameter is a LoRA adapter's A or B factor.
constexpr bool is_adapter(Role r) {
  return r >= Role::lora_q_a && r < Role::kCount;
}

// How a parameter starts: zeros, ones, N(0, init_std), N(0, init_std / sqrt(2L)) for the
// projections into the residual stream, or U(-1/sqrt(in), 1/sqrt(in)) with `in` its whole
// tensor's columns (a LoRA A factor, as PEFT's Kaiming-uniform with a = sqrt(5) draws it).
enum class Init : uint8_t { zeros, ones, normal, normal_residual, uniform_fan_in };

// Note [Tensor-parallel splits]
// How tensor parallelism (Megatron-LM's layout) cuts a parameter over the ranks of a group:
// along dimension `dim`, seen as `groups` equal blocks that are each cut into `degree` pieces,
// rank r taking piece r of every block (the fused q/k/v rows are three blocks, so each rank
// takes its own heads' queries, keys and values). A column-parallel product (q/k/v, the MLP's
// first) is cut along its outputs, a row-parallel one (the attention output projection, the
// MLP's second) along its inputs, so the pair needs one sum over the group in forward and one
// in backward; the token embedding and the head are cut along the vocabulary. dim -1: every
// rank holds the whole parameter (norms, the row-parallel products' biases, positions), and
// its gradient is every rank's alike, unless `partial_grad`: grouped key/value heads fewer than
// the ranks are held whole by every rank, each using the head its queries share (Megatron-LM
// replicates them likewise), so each rank's gradient is its queries' part, summed over the
// group with the unit's backward.
struct Split {
  int8_t dim = -1;
  int8_t groups = 1;
  bool partial_grad = false;
};
inline constexpr Split kReplicated{}, kRows{0, 1}, kCols{1, 1};

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
  Split split{};                      // under tensor parallelism (Note [Tensor-parallel splits])
  std::vector<int64_t> full_shape{};  // the whole tensor's shape (set by slice_spec)
};

// How a block product is cut under tensor parallelism: not at all, along its outputs (column
// parallel) or along its inputs (row parallel).
enum class Parallel : uint8_t { none, column, row };

// One matrix product of a block, as (inputs, outputs) per token. A block names a product by its
// weight when it runs it (block_access::product_forward), and how the product is cut decides
// which collective goes with it: the architecture places none (Note [Tensor-parallel splits]).
struct Matmul {
  int64_t in, out;
  Parallel parallel = Parallel::none;
  Role weight = Role::kCount;  // the product's weight (the first of stacked ones: Llama's q/k/v)
  Role bias = Role::kCount;    // its bias, or kCount: none
  int64_t whole_out = 0;       // of a column-parallel product's outputs, those not cut (replicated)
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
  q_pre,  // the queries and keys before their heads' norms (fp32), the norms' rstd per head
  k_pre,
  q_rstd,
  k_rstd,
  qk_out,  // scratch of the head norms: the normed heads, or the gradient at them
  qk_din,  // (fp32) and the gradient at their inputs
  lora_h,  // a LoRA adapter's x A^T and the gradient at it, (N, 2r): one adapter at a time
  lora_x,  // a LoRA adapter's input through its dropout, then the gradient there (fp32 bytes)
  kCount
};

// cheap: recomputed under selective checkpointing; stat and expensive: kept under selective;
// scratch: backward only, one copy shared by every block; work: the same, for forward and
// backward alike (training or not). Under full, only scratch and work exist beyond the
// block's input.
enum class ActKind : uint8_t { cheap, stat, expensive, scratch, work };

struct ActSpec {
  Act act;
  int64_t per_token;  // elements per token
  bool fp32;          // fp32 whatever the precision (statistics, the residual stream)
  ActKind kind;
  bool split = false;  // per head or per hidden unit: 1/degree of it under tensor parallelism
  int64_t whole = 0;   // of per_token, what a split activation keeps whole (replicated heads)
};

enum class NormKind : uint8_t { layernorm, rmsnorm };

// A LoRA adapter on one block product (Note [LoRA] in nn/lora.h): its name in
// train.lora.targets, the product it adds to (by the product's weight, Matmul::weight), the
// base weight whose outputs it adds to (one of a stacked product's: Llama's k_w within q/k/v),
// and its factors' roles.
struct Adapter {
  const char* name;
  Role product, base, a, b;
};

struct ArchSpec {
  NormKind norm = NormKind::layernorm;  // every norm of the model, the final one included
  std::string block_prefix;
  std::vector<ParamSpec> embedding, block, final;
  std::vector<ActSpec> block_acts;
  std::vector<Matmul> block_matmuls;  // fused products once (Llama's q/k/v is one)
  std::vector<Adapter> adapters;      // LoRA's, in block parameter order (none without LoRA)
  float init_std = 0.02f;
};

// The specification of `model`'s architecture at its shape (its record's spec), cut to the slice
// model.tensor names (slice_spec) under tensor parallelism.
ArchSpec arch_spec(const ModelConfig& model);

// `spec` (whole shapes) cut for `degree` ranks: each split parameter's shape along its dim, each
// split activation and each parallel product divided by degree (full_shape keeps the whole).
// Throws a UsageError naming the parameter and the fix when a dimension does not divide.
ArchSpec slice_spec(ArchSpec spec, int degree);

}  // namespace trainer::nn
