// GPT-NeoX (Pythia): no position embeddings; blocks whose attention and MLP both read the block's
// input, each through its own LayerNorm, and add to the residual stream side by side
// ("parallel residual": out = x + attn(ln1(x)) + mlp(ln2(x))); rotary embeddings on the first
// rotary_pct of each head's channels ("partial rotary"); biases everywhere; a GELU MLP of 4C;
// a final LayerNorm and a head tied to the token embedding or not. Names and orientations
// follow Hugging Face's GPTNeoXForCausalLM (torch.nn.Linear weights, stored (out, in)), except
// that the fused q/k/v rows are kept as [q; k; v] here and interleaved by head on export
// (ParamSpec::hf_rows). The MLP's GELU is the tanh form ("gelu_new") or, as Pythia's, the exact
// one ("gelu": model.gelu = erf).
#include "nn/architecture.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "nn/ops/rope.h"
#include "runtime/error.h"

namespace trainer::nn {

namespace {

using namespace block_access;

void neox_validate(const ModelConfig& m) {
  USAGE_CHECK(m.n_kv_head == 0 || m.n_kv_head == m.n_head,
              "model.n_kv_head = {} needs model.arch = llama (GPT-NeoX has as many key/value "
              "heads as heads)",
              m.n_kv_head);
  USAGE_CHECK(m.ffn_hidden == 0,
              "model.ffn_hidden = {} needs model.arch = llama (GPT-NeoX's MLP is 4 n_embd wide)",
              m.ffn_hidden);
  const int rd = m.rotary_dims();
  USAGE_CHECK(rd >= 2 && rd % 2 == 0 && rd <= 1024,
              "model.rotary_pct = {} turns {} of each head's {} channels: rotary embeddings need "
              "an even number from 2 to 1024",
              m.rotary_pct, rd, m.head_size());
  USAGE_CHECK(m.rope_theta > 1.0f, "model.rope_theta must exceed 1, got {}", m.rope_theta);
  USAGE_CHECK(m.head_dim == 0 || int64_t(m.head_dim) * m.n_head == m.n_embd,
              "model.head_dim = {} needs model.arch = llama, qwen2 or qwen3 (GPT-NeoX's heads "
              "split n_embd)",
              m.head_dim);
}

ArchSpec neox_spec(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, H = m.n_head;
  ArchSpec s;
  s.block_prefix = "gpt_neox.layers.";
  s.embedding = {
      {"gpt_neox.embed_in.weight", Role::tok_embedding, {V, C}, false, Init::normal, {}, kRows}};
  const std::array<int64_t, 2> by_head{3, H};
  s.block = {
      {"input_layernorm.weight", Role::norm1_w, {C}, false, Init::ones},
      {"input_layernorm.bias", Role::norm1_b, {C}, false, Init::zeros},
      {"attention.query_key_value.weight",
       Role::qkv_w,
       {3 * C, C},
       true,
       Init::normal,
       by_head,
       {0, 3}},
      {"attention.query_key_value.bias", Role::qkv_b, {3 * C}, false, Init::zeros, by_head, {0, 3}},
      {"attention.dense.weight", Role::attn_proj_w, {C, C}, true, Init::normal_residual, {}, kCols},
      {"attention.dense.bias", Role::attn_proj_b, {C}, false, Init::zeros},
      {"post_attention_layernorm.weight", Role::norm2_w, {C}, false, Init::ones},
      {"post_attention_layernorm.bias", Role::norm2_b, {C}, false, Init::zeros},
      {"mlp.dense_h_to_4h.weight", Role::fc_w, {4 * C, C}, true, Init::normal, {}, kRows},
      {"mlp.dense_h_to_4h.bias", Role::fc_b, {4 * C}, false, Init::zeros, {}, kRows},
      {"mlp.dense_4h_to_h.weight",
       Role::fc_proj_w,
       {C, 4 * C},
       true,
       Init::normal_residual,
       {},
       kCols},
      {"mlp.dense_4h_to_h.bias", Role::fc_proj_b, {C}, false, Init::zeros}};
  s.final = {{"gpt_neox.final_layer_norm.weight", Role::final_norm_w, {C}, false, Init::ones},
             {"gpt_neox.final_layer_norm.bias", Role::final_norm_b, {C}, false, Init::zeros}};
  if (!m.tie_embeddings)
    s.final.push_back({"embed_out.weight", Role::lm_head, {V, C}, true, Init::normal, {}, kRows});
  using K = ActKind;
  s.block_acts = {{Act::ln1, C, false, K::cheap},
                  {Act::ln1_mean, 1, true, K::stat},
                  {Act::ln1_rstd, 1, true, K::stat},
                  {Act::qkv, 3 * C, false, K::expensive, true},
                  {Act::atty, C, false, K::expensive, true},
                  {Act::att_lse, H, true, K::stat, true},
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

void neox_block_forward(const Context& ctx, const BlockTensors& t, BlockPass pass) {
  using enum Act;
  using R = Role;
  auto norms = [&] {
    layernorm_forward(ctx, A(t, ln1), A(t, ln1_mean), A(t, ln1_rstd), t.x, W(t, R::norm1_w),
                      W(t, R::norm1_b), t.model->norm_eps);
    layernorm_forward(ctx, A(t, ln2), A(t, ln2_mean), A(t, ln2_rstd), t.x, W(t, R::norm2_w),
                      W(t, R::norm2_b), t.model->norm_eps);
  };
  if (pass == BlockPass::recompute_cheap) {
    norms();
    gelu_forward(ctx, A(t, fch_gelu), A(t, fch), t.model->gelu);
    return;
  }
  const int hs = t.model->head_size(), rd = t.model->rotary_dims();
  const Rope rope = t.model->rope();
  norms();
  // Attention branch.
  product_forward(ctx, t, R::qkv_w, A(t, qkv), A(t, ln1), [&](auto& y, auto& x, auto& b) {
    linear_forward(ctx, y, x, W(t, R::qkv_w), b, kOutIn);
  });
  const auto [q, k, v] = qkv_parts(t, A(t, qkv));
  rope_forward(ctx, q, t.positions, hs, rd, rope);
  rope_forward(ctx, k, t.positions, hs, rd, rope);
  attend(ctx, t, q, k, v);
  product_forward(ctx, t, R::attn_proj_w, t.tmp, A(t, atty), [&](auto& y, auto& x, auto& b) {
    linear_forward(ctx, y, x, W(t, R::attn_proj_w), b, kOutIn);
  });
  drop_branch(ctx, t, Branch::attention);
  if (pass == BlockPass::train) residual_forward(ctx, t.out, t.x, t.tmp);
  // MLP branch, beside it.
  product_forward(ctx, t, R::fc_w, A(t, fch), A(t, ln2), [&](auto& y, auto& x, auto& b) {
    linear_gelu_forward(ctx, A(t, fch_gelu), y, x, W(t, R::fc_w), b, t.model->gelu, kOutIn);
  });
  product_forward(ctx, t, R::fc_proj_w, t.tmp, A(t, fch_gelu), [&](auto& y, auto& x, auto& b) {
    linear_forward(ctx, y, x, W(t, R::fc_proj_w), b, kOutIn);
  });
  drop_branch(ctx, t, Branch::mlp);
  if (pass == BlockPass::train) residual_forward(ctx, t.out, t.out, t.tmp);
}

// Both branches take the output's gradient before either norm adds its input's gradient to
// d_res.
void neox_block_backward(const Context& ctx, const BlockTensors& t) {
  using enum Act;
  using R = Role;
  const int hs = t.model->head_size(), rd = t.model->rotary_dims();
  const Rope rope = t.model->rope();
  const Tensor d_out = branch_grad(ctx, t, Branch::mlp);
  product_backward(ctx, t, R::fc_proj_w, A(t, d_fch), d_out, A(t, fch_gelu),
                   [&](auto& dx, auto& dy, auto& x) {
                     gelu_linear_backward(ctx, dx, G(t, R::fc_proj_w), G(t, R::fc_proj_b), dy, x,
                                          W(t, R::fc_proj_w), A(t, fch), t.model->gelu, kOutIn);
                   });
  const Tensor d_attn = branch_grads_differ(t) ? branch_grad(ctx, t, Branch::attention) : d_out;
  product_backward(ctx, t, R::attn_proj_w, A(t, d_atty), d_attn, A(t, atty),
                   [&](auto& dx, auto& dy, auto& x) {
                     linear_backward(ctx, dx, G(t, R::attn_proj_w), G(t, R::attn_proj_b), dy, x,
                                     W(t, R::attn_proj_w), kOutIn);
                   });
  // MLP branch.
  product_backward(
      ctx, t, R::fc_w, t.d_ln, A(t, d_fch), A(t, ln2), [&](auto& dx, auto& dy, auto& x) {
        linear_backward(ctx, dx, G(t, R::fc_w), G(t, R::fc_b), dy, x, W(t, R::fc_w), kOutIn);
      });
  layernorm_backward(ctx, t.d_res, G(t, R::norm2_w), G(t, R::norm2_b), t.d_ln, t.x,
                     W(t, R::norm2_w), A(t, ln2_mean), A(t, ln2_rstd));
  // Attention branch.
  const std::array<Tensor, 3> d = qkv_parts(t, A(t, d_qkv));
  attend_backward(ctx, t, d, qkv_parts(t, A(t, qkv)));
  const Tensor &dq = d[0], &dk = d[1];
  rope_backward(ctx, dq, t.positions, hs, rd, rope);
  rope_backward(ctx, dk, t.positions, hs, rd, rope);
  product_backward(
      ctx, t, R::qkv_w, t.d_ln, A(t, d_qkv), A(t, ln1), [&](auto& dx, auto& dy, auto& x) {
        linear_backward(ctx, dx, G(t, R::qkv_w), G(t, R::qkv_b), dy, x, W(t, R::qkv_w), kOutIn);
      });
  layernorm_backward(ctx, t.d_res, G(t, R::norm1_w), G(t, R::norm1_b), t.d_ln, t.x,
                     W(t, R::norm1_w), A(t, ln1_mean), A(t, ln1_rstd));
}

nlohmann::json neox_hf_config(const ModelConfig& m) {
  return {{"model_type", "gpt_neox"},
          {"architectures", {"GPTNeoXForCausalLM"}},
          {"vocab_size", m.vocab_size},
          {"max_position_embeddings", m.max_seq_len},
          {"hidden_size", m.n_embd},
          {"intermediate_size", 4 * m.n_embd},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"hidden_act", m.gelu == GeluForm::erf ? "gelu" : "gelu_new"},
          {"rotary_pct", m.rotary_pct},
          {"partial_rotary_factor", m.rotary_pct},
          {"rotary_emb_base", m.rope_theta},
          {"rope_theta", m.rope_theta},
          {"rope_scaling", hf_rope_scaling_json(m)},
          {"layer_norm_eps", as_decimal(m.norm_eps)},
          {"use_parallel_residual", true},
          {"attention_bias", true},
          {"tie_word_embeddings", m.tie_embeddings}};
}

// GPTNeoXConfig's fields (its defaults where absent: the exact GELU among them).
ModelConfig neox_from_hf(HfConfigReader& hf) {
  ModelConfig m;
  m.vocab_size = int(hf.integer("vocab_size", 50432));
  m.max_seq_len = int(hf.integer("max_position_embeddings", 2048));
  m.n_embd = int(hf.integer("hidden_size", 6144));
  m.n_layer = int(hf.integer("num_hidden_layers", 44));
  m.n_head = int(hf.integer("num_attention_heads", 64));
  m.rotary_pct = hf.real("partial_rotary_factor", hf.real("rotary_pct", 0.25));
  m.rope_theta = float(hf.real("rope_theta", hf.real("rotary_emb_base", 10000.0)));
  m.tie_embeddings = hf.boolean("tie_word_embeddings", false);
  hf.expect("intermediate_size", 24576, {4 * int64_t(m.n_embd)}, "an MLP of 4 hidden_size");
  m.gelu = hf_gelu(hf, "hidden_act", "gelu");
  if (!hf.boolean("use_parallel_residual", true))
    throw UsageError(
        fmt::format("{}: field \"use_parallel_residual\" = false is not supported: "
                    "the trainer computes attention and MLP in parallel",
                    hf.file().string()));
  m.norm_eps = float(hf.real("layer_norm_eps", 1e-5));
  hf_rope_scaling(hf, m);
  hf.expect("attention_bias", true, {true}, "projections with biases");
  hf.ignore({"classifier_dropout"});  // the classification model's
  return m;
}

}  // namespace

extern const Architecture kNeox = {
    "neox",
    "GPT-NeoX/Pythia: parallel attention and MLP, partial rotary positions, LayerNorm, GELU, "
    "biases, tied or untied head",
    neox_spec,
    neox_validate,
    neox_block_forward,
    neox_block_backward,
    "GPTNeoXForCausalLM",
    "gpt_neox",
    neox_hf_config,
    neox_from_hf,
    "",
    {".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq", "embed_out.weight"},
    // hidden_dropout drops the embeddings' output and both branches' (GPTNeoXModel's
    // emb_dropout, post_attention_dropout and post_mlp_dropout).
    {{"attention_dropout", &DropoutRates::attention, 0.0},
     {"hidden_dropout", &DropoutRates::embedding, 0.0},
     {"hidden_dropout", &DropoutRates::residual, 0.0}}};

}  // namespace trainer::nn
