#include "nn/model_config.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "nn/architecture.h"
#include "nn/lora.h"
#include "runtime/error.h"

namespace trainer::nn {

double as_decimal(float x) {
  return std::stod(fmt::format("{}", x));
}

void ModelConfig::validate() const {
  USAGE_CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
  USAGE_CHECK(max_seq_len > 0, "model.max_seq_len must be positive, got {}", max_seq_len);
  USAGE_CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  USAGE_CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  USAGE_CHECK(n_embd > 0 && (head_dim > 0 || n_embd % n_head == 0),
              "model.n_embd ({}) must be a positive multiple of model.n_head ({}), or "
              "model.head_dim set",
              n_embd, n_head);
  USAGE_CHECK(head_dim >= 0, "model.head_dim must be >= 0, got {}", head_dim);
  USAGE_CHECK(rotary_pct > 0 && rotary_pct <= 1, "model.rotary_pct must be in (0, 1], got {}",
              rotary_pct);
  USAGE_CHECK(norm_eps > 0 && norm_eps <= 1, "model.norm_eps must be in (0, 1], got {}", norm_eps);
  for (const auto& [key, p] : {std::pair{"model.embedding_dropout", dropout.embedding},
                               std::pair{"model.attention_dropout", dropout.attention},
                               std::pair{"model.residual_dropout", dropout.residual},
                               std::pair{"train.lora.dropout", dropout.adapter}})
    USAGE_CHECK(p >= 0 && p < 1, "{} = {}: a dropout probability must be in [0, 1)", key, p);
  validate_rope_scaling();
  architecture().validate(*this);
  validate_lora(*this);
  int next = 0;
  for (const auto& [b, e] : pipeline.chunks) {
    TRAINER_ASSERT(next <= b && b < e && e <= n_layer, "pipeline chunk [{}, {}) of {} layers", b, e,
                   n_layer);
    next = e;
  }
  const int n = tensor.degree;
  USAGE_CHECK(n >= 1 && tensor.rank >= 0 && tensor.rank < n, "tensor-parallel rank {} of {}",
              tensor.rank, n);
  if (n == 1) return;
  USAGE_CHECK(n_head % n == 0,
              "dist.tensor_parallel = {} does not divide model.n_head = {} (each rank takes whole "
              "heads: choose a degree that divides the heads)",
              n, n_head);
  USAGE_CHECK(kv_heads() % n == 0 || n % kv_heads() == 0,
              "dist.tensor_parallel = {} neither divides model.n_kv_head = {} nor is a multiple of "
              "it (the ranks take whole key/value heads, or share each head: choose a degree that "
              "divides n_kv_head or that n_kv_head divides)",
              n, kv_heads());
  USAGE_CHECK(vocab_size % n == 0,
              "dist.tensor_parallel = {} does not divide model.vocab_size = {} (the embedding and "
              "the head are cut by vocabulary rows: pad the vocabulary to a multiple of {})",
              n, vocab_size, n);
}

Rope ModelConfig::rope() const {
  Rope r{rope_theta,           rope_scaling,          rope_factor,
         rope_low_freq_factor, rope_high_freq_factor, float(rope_original_context)};
  if (rope_scaling != RopeScaling::yarn) return r;
  std::tie(r.ramp_low, r.ramp_span) = yarn_ramp(rope_theta, rope_original_context, rotary_dims(),
                                                rope_beta_fast, rope_beta_slow, rope_truncate);
  r.attention_factor =
      rope_attention_factor > 0 ? rope_attention_factor : float(yarn_mscale(rope_factor));
  return r;
}

void ModelConfig::validate_rope_scaling() const {
  const char* type = kRopeScalingNames.name(rope_scaling);
  // The keys a scaling type does not read keep their defaults, so that none is set in vain.
  const ModelConfig d;
  const RopeScaling s = rope_scaling;
  if (s == RopeScaling::none)
    USAGE_CHECK(rope_factor == d.rope_factor,
                "model.rope_scaling_factor = {} needs model.rope_scaling = linear, llama3 or yarn",
                rope_factor);
  if (s != RopeScaling::llama3)
    USAGE_CHECK(rope_low_freq_factor == d.rope_low_freq_factor &&
                    rope_high_freq_factor == d.rope_high_freq_factor,
                "model.rope_low_freq_factor and rope_high_freq_factor need model.rope_scaling = "
                "llama3 (model.rope_scaling = {})",
                type);
  if (s != RopeScaling::llama3 && s != RopeScaling::yarn)
    USAGE_CHECK(rope_original_context == d.rope_original_context,
                "model.rope_original_context needs model.rope_scaling = llama3 or yarn "
                "(model.rope_scaling = {})",
                type);
  if (s != RopeScaling::yarn)
    USAGE_CHECK(rope_beta_fast == d.rope_beta_fast && rope_beta_slow == d.rope_beta_slow &&
                    rope_attention_factor == d.rope_attention_factor &&
                    rope_truncate == d.rope_truncate,
                "model.rope_beta_fast, rope_beta_slow, rope_attention_factor and rope_truncate "
                "need model.rope_scaling = yarn (model.rope_scaling = {})",
                type);
  if (s == RopeScaling::none) return;
  USAGE_CHECK(rope_factor >= 1, "model.rope_scaling_factor must be at least 1 for {}, got {}", type,
              rope_factor);
  USAGE_CHECK(rope_low_freq_factor > 0 && rope_high_freq_factor > rope_low_freq_factor,
              "model.rope_high_freq_factor ({}) must exceed model.rope_low_freq_factor ({}), "
              "which must be positive",
              rope_high_freq_factor, rope_low_freq_factor);
  USAGE_CHECK(rope_original_context > 0, "model.rope_original_context must be positive, got {}",
              rope_original_context);
  USAGE_CHECK(rope_beta_fast > 0 && rope_beta_slow > 0 && rope_attention_factor >= 0,
              "model.rope_beta_fast ({}) and rope_beta_slow ({}) must be positive, and "
              "model.rope_attention_factor ({}) positive or 0 (the default)",
              rope_beta_fast, rope_beta_slow, rope_attention_factor);
}

std::vector<std::pair<int, int>> ModelConfig::held_chunks() const {
  if (pipeline.whole()) return {{0, n_layer}};
  return pipeline.chunks;
}

std::vector<int> ModelConfig::held_layers() const {
  std::vector<int> layers;
  for (const auto& [b, e] : held_chunks())
    for (int l = b; l < e; ++l) layers.push_back(l);
  return layers;
}

bool ModelConfig::holds_embedding_unit() const {
  return pipeline.first || (pipeline.last && tie_embeddings);
}

int64_t ModelConfig::matmul_params() const {
  int64_t block = 0;
  for (const Matmul& m : architecture().spec(whole()).block_matmuls) block += m.in * m.out;
  return int64_t(vocab_size) * n_embd + int64_t(n_layer) * block;
}

TokenFlops ModelConfig::token_flops() const {
  // Under LoRA the frozen products compute no weight gradient (4 FLOPs a parameter, not 6),
  // and each adapter factor is a product of its own (Note [LoRA] in nn/lora.h).
  double adapters = 0;
  if (lora.on())
    for (const ParamSpec& p : arch_spec(whole()).block)
      if (is_adapter(p.role)) adapters += double(p.shape[0]) * double(p.shape[1]) * n_layer;
  return {(lora.on() ? 4.0 : 6.0) * double(matmul_params()) + 6.0 * adapters,
          12.0 * n_layer * double(attention_width())};
}

Recompute ExecConfig::policy(int layer) const {
  if (recompute_layers.empty()) return recompute;
  const bool listed =
      std::find(recompute_layers.begin(), recompute_layers.end(), layer) != recompute_layers.end();
  return listed ? recompute : Recompute::none;
}

void ExecConfig::validate(const ModelConfig& model) const {
  USAGE_CHECK(compute == DType::f32 || compute == DType::bf16,
              "model.precision must be fp32 or bf16, got {}", dtype_name(compute));
  USAGE_CHECK(grad == DType::f32 || grad == DType::bf16,
              "dist.grad_dtype must be fp32 or bf16, got {}", dtype_name(grad));
  USAGE_CHECK(grad == DType::f32 || compute == DType::bf16,
              "dist.grad_dtype = bf16 needs model.precision = bf16");
  for (int l : recompute_layers)
    USAGE_CHECK(l >= 0 && l < model.n_layer,
                "model.checkpoint_layers names block {}, but the model has blocks 0..{}", l,
                model.n_layer - 1);
  USAGE_CHECK(max_rows > 0 && max_seq_len > 0, "a model sized for {} x {} tokens", max_rows,
              max_seq_len);
  USAGE_CHECK(max_seq_len <= model.max_seq_len, "sequence length {} exceeds model.max_seq_len {}",
              max_seq_len, model.max_seq_len);
}

}  // namespace trainer::nn
