// GPT-2: learned token and position embeddings, pre-LayerNorm blocks (causal multi-head
// attention, GELU MLP), a final LayerNorm and a head tied to the token embedding. Names and
// orientations follow Hugging Face's GPT2LMHeadModel (Conv1D weights stored (in, out)).
#include "nn/architecture.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "runtime/error.h"

namespace trainer::nn {

namespace {

using namespace block_access;

void gpt2_validate(const ModelConfig& m) {
  USAGE_CHECK(m.tie_embeddings,
              "model.tie_embeddings = false needs model.arch = llama or neox (GPT-2 ties its "
              "head to the token embedding)");
  USAGE_CHECK(m.n_kv_head == 0 || m.n_kv_head == m.n_head,
              "model.n_kv_head = {} needs model.arch = llama (GPT-2 has as many key/value heads "
              "as heads)",
              m.n_kv_head);
  USAGE_CHECK(m.rotary_pct == 1.0,
              "model.rotary_pct = {} needs model.arch = neox (GPT-2 has learned positions)",
              m.rotary_pct);
  USAGE_CHECK(m.head_dim == 0 || int64_t(m.head_dim) * m.n_head == m.n_embd,
              "model.head_dim = {} needs model.arch = llama, qwen2 or qwen3 (GPT-2's heads split "
              "n_embd)",
              m.head_dim);
  USAGE_CHECK(m.rope_scaling == RopeScaling::none,
              "model.rope_scaling = {} needs model.arch = llama or neox (GPT-2 has learned "
              "positions)",
              kRopeScalingNames.name(m.rope_scaling));
}

ArchSpec gpt2_spec(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, P = m.max_seq_len, H = m.n_head;
  ArchSpec s;
  s.block_prefix = "h.";
  s.embedding = {{"wte.weight", Role::tok_embedding, {V, C}, false, Init::normal, {}, kRows},
                 {"wpe.weight", Role::pos_embedding, {P, C}, false, Init::normal}};
  s.block = {
      {"ln_1.weight", Role::norm1_w, {C}, false, Init::ones},
      {"ln_1.bias", Role::norm1_b, {C}, false, Init::zeros},
      {"attn.c_attn.weight", Role::qkv_w, {C, 3 * C}, true, Init::normal, {}, {1, 3}},
      {"attn.c_attn.bias", Role::qkv_b, {3 * C}, false, Init::zeros, {}, {0, 3}},
      {"attn.c_proj.weight", Role::attn_proj_w, {C, C}, true, Init::normal_residual, {}, kRows},
      {"attn.c_proj.bias", Role::attn_proj_b, {C}, false, Init::zeros},
      {"ln_2.weight", Role::norm2_w, {C}, false, Init::ones},
      {"ln_2.bias", Role::norm2_b, {C}, false, Init::zeros},
      {"mlp.c_fc.weight", Role::fc_w, {C, 4 * C}, true, Init::normal, {}, kCols},
      {"mlp.c_fc.bias", Role::fc_b, {4 * C}, false, Init::zeros, {}, kRows},
      {"mlp.c_proj.weight", Role::fc_proj_w, {4 * C, C}, true, Init::normal_residual, {}, kRows},
      {"mlp.c_proj.bias", Role::fc_proj_b, {C}, false, Init::zeros}};
  s.final = {{"ln_f.weight", Role::final_norm_w, {C}, false, Init::ones},
             {"ln_f.bias", Role::final_norm_b, {C}, false, Init::zeros}};
  using K = ActKind;
  s.block_acts = {{Act::ln1, C, false, K::cheap},
                  {Act::ln1_mean, 1, true, K::stat},
                  {Act::ln1_rstd, 1, true, K::stat},
                  {Act::qkv, 3 * C, false, K::expensive, true},
                  {Act::atty, C, false, K::expensive, true},
                  {Act::att_lse, H, true, K::stat, true},
                  {Act::res_mid, C, true, K::expensive},
                  {Act::ln2, C, false, K::cheap},
                  {Act::ln2_mean, 1, true, K::stat},
                  {Act::ln2_rstd, 1, true, K::stat},
                  {Act::fch, 4 * C, false, K::expensive, true},
                  {Act::fch_gelu, 4 * C, false, K::cheap, true},
                  {Act::d_qkv, 3 * C, false, K::scratch, true},
                  {Act::d_atty, C, false, K::scratch, true},
                  {Act::d_fch, 4 * C, false, K::scratch, true}};
  s.block_matmuls = {{C, 3 * C, Parallel::column, Role::qkv_w, Role::qkv_b},
                     {C, C, Parallel::row, Role::attn_proj_w, Role::attn_proj_b},
                     {C, 4 * C, Parallel::column, Role::fc_w, Role::fc_b},
                     {4 * C, C, Parallel::row, Role::fc_proj_w, Role::fc_proj_b}};
  return s;
}

void gpt2_block_forward(const Context& ctx, const BlockTensors& t, BlockPass pass) {
  using enum Act;
  using R = Role;
  if (pass == BlockPass::recompute_cheap) {
    layernorm_forward(ctx, A(t, ln1), A(t, ln1_mean), A(t, ln1_rstd), t.x, W(t, R::norm1_w),
                      W(t, R::norm1_b), t.model->norm_eps);
    layernorm_forward(ctx, A(t, ln2), A(t, ln2_mean), A(t, ln2_rstd), A(t, res_mid),
                      W(t, R::norm2_w), W(t, R::norm2_b), t.model->norm_eps);
    gelu_forward(ctx, A(t, fch_gelu), A(t, fch), t.model->gelu);
    return;
  }
  layernorm_forward(ctx, A(t, ln1), A(t, ln1_mean), A(t, ln1_rstd), t.x, W(t, R::norm1_w),
                    W(t, R::norm1_b), t.model->norm_eps);
  product_forward(ctx, t, R::qkv_w, A(t, qkv), A(t, ln1),
                  [&](auto& y, auto& x, auto& b) { linear_forward(ctx, y, x, W(t, R::qkv_w), b); });
  const auto [q, k, v] = qkv_parts(t, A(t, qkv));
  attend(ctx, t, q, k, v);
  product_forward(ctx, t, R::attn_proj_w, t.tmp, A(t, atty), [&](auto& y, auto& x, auto& b) {
    linear_forward(ctx, y, x, W(t, R::attn_proj_w), b);
  });
  drop_branch(ctx, t, Branch::attention);
  layernorm_residual_forward(ctx, A(t, res_mid), A(t, ln2), A(t, ln2_mean), A(t, ln2_rstd), t.x,
                             t.tmp, W(t, R::norm2_w), W(t, R::norm2_b), t.model->norm_eps);
  product_forward(ctx, t, R::fc_w, A(t, fch), A(t, ln2), [&](auto& y, auto& x, auto& b) {
    linear_gelu_forward(ctx, A(t, fch_gelu), y, x, W(t, R::fc_w), b, t.model->gelu);
  });
  product_forward(ctx, t, R::fc_proj_w, t.tmp, A(t, fch_gelu), [&](auto& y, auto& x, auto& b) {
    linear_forward(ctx, y, x, W(t, R::fc_proj_w), b);
  });
  drop_branch(ctx, t, Branch::mlp);
  if (pass == BlockPass::train) residual_forward(ctx, t.out, A(t, res_mid), t.tmp);
}

void gpt2_block_backward(const Context& ctx, const BlockTensors& t) {
  using enum Act;
  using R = Role;
  // MLP branch (GELU's backward in the second layer's input-gradient product).
  product_backward(ctx, t, R::fc_proj_w, A(t, d_fch), branch_grad(ctx, t, Branch::mlp),
                   A(t, fch_gelu), [&](auto& dx, auto& dy, auto& x) {
                     gelu_linear_backward(ctx, dx, G(t, R::fc_proj_w), G(t, R::fc_proj_b), dy, x,
                                          W(t, R::fc_proj_w), A(t, fch), t.model->gelu);
                   });
  product_backward(ctx, t, R::fc_w, t.d_ln, A(t, d_fch), A(t, ln2),
                   [&](auto& dx, auto& dy, auto& x) {
                     linear_backward(ctx, dx, G(t, R::fc_w), G(t, R::fc_b), dy, x, W(t, R::fc_w));
                   });
  layernorm_backward(ctx, t.d_res, G(t, R::norm2_w), G(t, R::norm2_b), t.d_ln, A(t, res_mid),
                     W(t, R::norm2_w), A(t, ln2_mean), A(t, ln2_rstd));
  // Attention branch.
  product_backward(ctx, t, R::attn_proj_w, A(t, d_atty), branch_grad(ctx, t, Branch::attention),
                   A(t, atty), [&](auto& dx, auto& dy, auto& x) {
                     linear_backward(ctx, dx, G(t, R::attn_proj_w), G(t, R::attn_proj_b), dy, x,
                                     W(t, R::attn_proj_w));
                   });
  attend_backward(ctx, t, qkv_parts(t, A(t, d_qkv)), qkv_parts(t, A(t, qkv)));
  product_backward(
      ctx, t, R::qkv_w, t.d_ln, A(t, d_qkv), A(t, ln1), [&](auto& dx, auto& dy, auto& x) {
        linear_backward(ctx, dx, G(t, R::qkv_w), G(t, R::qkv_b), dy, x, W(t, R::qkv_w));
      });
  layernorm_backward(ctx, t.d_res, G(t, R::norm1_w), G(t, R::norm1_b), t.d_ln, t.x,
                     W(t, R::norm1_w), A(t, ln1_mean), A(t, ln1_rstd));
}

nlohmann::json gpt2_hf_config(const ModelConfig& m) {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", m.vocab_size},
          {"n_positions", m.max_seq_len},
          {"n_ctx", m.max_seq_len},
          {"n_embd", m.n_embd},
          {"n_layer", m.n_layer},
          {"n_head", m.n_head},
          {"activation_function", m.gelu == GeluForm::erf ? "gelu" : "gelu_new"},
          {"layer_norm_epsilon", as_decimal(m.norm_eps)},
          {"tie_word_embeddings", true}};
}

// GPT2Config's fields (its defaults where absent).
ModelConfig gpt2_from_hf(HfConfigReader& hf) {
  ModelConfig m;
  m.vocab_size = int(hf.integer("vocab_size", 50257));
  m.max_seq_len = int(hf.integer("n_positions", 1024));
  m.n_embd = int(hf.integer("n_embd", 768));
  m.n_layer = int(hf.integer("n_layer", 12));
  m.n_head = int(hf.integer("n_head", 12));
  hf.expect("n_inner", nullptr, {4 * int64_t(m.n_embd)}, "an MLP of 4 n_embd");
  m.gelu = hf_gelu(hf, "activation_function", "gelu_new");
  m.norm_eps = float(hf.real("layer_norm_epsilon", 1e-5));
  hf.expect("scale_attn_weights", true, {true}, "attention scaled by 1/sqrt(head size)");
  hf.expect("scale_attn_by_inverse_layer_idx", false, {false}, "no per-layer attention scaling");
  hf.expect("add_cross_attention", false, {false}, "no cross-attention");
  hf.expect("tie_word_embeddings", true, {true}, "a head tied to the token embedding");
  // How HF upcasts attention in fp16, and the double-heads model's classifier: not the model.
  hf.ignore({"n_ctx", "reorder_and_upcast_attn", "summary_type", "summary_use_proj",
             "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
             "task_specific_params"});
  return m;
}

}  // namespace

extern const Architecture kGpt2 = {"gpt2",
                                   "learned positions, LayerNorm, GELU, biases, tied head",
                                   gpt2_spec,
                                   gpt2_validate,
                                   gpt2_block_forward,
                                   gpt2_block_backward,
                                   "GPT2LMHeadModel",
                                   "gpt2",
                                   gpt2_hf_config,
                                   gpt2_from_hf,
                                   "transformer.",
                                   {".attn.bias", ".attn.masked_bias", "lm_head.weight"},
                                   {{"embd_pdrop", &DropoutRates::embedding, 0.1},
                                    {"attn_pdrop", &DropoutRates::attention, 0.1},
                                    {"resid_pdrop", &DropoutRates::residual, 0.1}}};

}  // namespace trainer::nn
