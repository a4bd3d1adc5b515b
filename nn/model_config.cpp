#include "nn/model_config.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace trainer::nn {

Arch parse_arch(const std::string& name) {
  for (Arch a : {Arch::gpt2, Arch::llama})
    if (name == arch_name(a)) return a;
  throw UsageError(fmt::format("model.arch must be gpt2 or llama, got '{}'", name));
}

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::gpt2:
      return "gpt2";
    case Arch::llama:
      return "llama";
  }
  return "?";
}

void ModelConfig::validate() const {
  USAGE_CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
  USAGE_CHECK(max_seq_len > 0, "model.max_seq_len must be positive, got {}", max_seq_len);
  USAGE_CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  USAGE_CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  USAGE_CHECK(n_embd > 0 && n_embd % n_head == 0,
              "model.n_embd ({}) must be a positive multiple of model.n_head ({})", n_embd, n_head);
  if (arch == Arch::gpt2) {
    USAGE_CHECK(tie_embeddings,
                "model.tie_embeddings = false needs model.arch = llama (GPT-2 ties its "
                "head to the token embedding)");
    USAGE_CHECK(
        n_kv_head == 0 || n_kv_head == n_head,
        "model.n_kv_head = {} needs model.arch = llama (GPT-2 has as many key/value heads as "
        "heads)",
        n_kv_head);
    return;
  }
  USAGE_CHECK(n_kv_head >= 0 && n_head % kv_heads() == 0,
              "model.n_kv_head ({}) must divide model.n_head ({})", n_kv_head, n_head);
  USAGE_CHECK(head_size() % 2 == 0 && head_size() <= 1024,
              "rotary embeddings need an even head size of at most 1024, got n_embd / n_head = {}",
              head_size());
  // The fused q/k/v and gate/up projections read adjacent tensors of the flat buffer as one
  // matrix, which 16-element alignment leaves adjacent when C is a multiple of 16.
  USAGE_CHECK(n_embd % 16 == 0, "model.n_embd ({}) must be a multiple of 16 for llama", n_embd);
  USAGE_CHECK(ffn_hidden >= 0 && ffn_multiple_of > 0,
              "model.ffn_hidden ({}) must be >= 0 and model.ffn_multiple_of ({}) positive",
              ffn_hidden, ffn_multiple_of);
  USAGE_CHECK(rope_theta > 1.0f, "model.rope_theta must exceed 1, got {}", rope_theta);
}

int64_t ModelConfig::ffn_size() const {
  const int64_t want = ffn_hidden > 0 ? ffn_hidden : 8 * int64_t(n_embd) / 3;
  return (want + ffn_multiple_of - 1) / ffn_multiple_of * ffn_multiple_of;
}

int64_t ModelConfig::matmul_params() const {
  const int64_t C = n_embd, head = int64_t(vocab_size) * C;
  if (arch == Arch::gpt2) return head + int64_t(n_layer) * (12 * C * C);
  const int64_t attn = 2 * C * C + 2 * C * kv_channels(), mlp = 3 * C * ffn_size();
  return head + int64_t(n_layer) * (attn + mlp);
}

double ModelConfig::flops_per_token(int seq_len) const {
  return 6.0 * double(matmul_params()) + 12.0 * n_layer * n_embd * double(seq_len);
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (name == recompute_name(r)) return r;
  throw UsageError(
      fmt::format("activation checkpointing must be none, selective or full, got '{}'", name));
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

Recompute ExecConfig::policy(int layer) const {
  if (recompute_layers.empty()) return recompute;
  const bool listed =
      std::find(recompute_layers.begin(), recompute_layers.end(), layer) != recompute_layers.end();
  return listed ? recompute : Recompute::none;
}

void ExecConfig::validate(const ModelConfig& model) const {
  CHECK(compute == DType::f32 || compute == DType::bf16,
        "model.precision must be fp32 or bf16, got {}", dtype_name(compute));
  CHECK(grad == DType::f32 || grad == DType::bf16, "dist.grad_dtype must be fp32 or bf16, got {}",
        dtype_name(grad));
  CHECK(grad == DType::f32 || compute == DType::bf16,
        "dist.grad_dtype = bf16 needs model.precision = bf16");
  for (int l : recompute_layers)
    CHECK(l >= 0 && l < model.n_layer,
          "model.checkpoint_layers names block {}, but the model has blocks 0..{}", l,
          model.n_layer - 1);
  CHECK(max_rows > 0 && max_seq_len > 0, "a model sized for {} x {} tokens", max_rows, max_seq_len);
  CHECK(max_seq_len <= model.max_seq_len, "sequence length {} exceeds model.max_seq_len {}",
        max_seq_len, model.max_seq_len);
}

}  // namespace trainer::nn
