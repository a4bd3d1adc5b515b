// Llama: no position embeddings; pre-RMSNorm blocks with rotary embeddings on the queries and
// keys (positions restart at each document of a packed row), grouped-query causal attention
// and a SwiGLU MLP, no biases; a final RMSNorm and a head tied to the token embedding or not.
// Names and orientations follow Hugging Face's LlamaForCausalLM (torch.nn.Linear weights,
// stored (out, in)). The q/k/v projections are adjacent in the flat buffer and run as one
// matmul over their stacked rows, as are gate/up. Two published families are this model with
// one more thing, and their records share this file's functions: Qwen2 (and Qwen2.5, kQwen2)
// adds biases to the q, k and v projections, adjacent and run with them; Qwen3 (kQwen3) an
// RMSNorm of each query and key head before the rotary embeddings, and heads of head_dim
// channels whatever n_embd / n_head is.
#include <algorithm>
#include <optional>

#include "nn/architecture.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/rope.h"
#include "nn/ops/swiglu.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::nn {

namespace {

using namespace block_access;

bool has_qkv_bias(const ModelConfig& m) {
  return m.arch == "qwen2";
}
bool has_head_norms(const ModelConfig& m) {
  return m.arch == "qwen3";
}

void llama_validate(const ModelConfig& m) {
  USAGE_CHECK(m.gelu == GeluForm::tanh,
              "model.gelu = erf needs model.arch = gpt2 or neox (Llama's MLP is SwiGLU)");
  USAGE_CHECK(m.n_head % m.kv_heads() == 0, "model.n_kv_head ({}) must divide model.n_head ({})",
              m.n_kv_head, m.n_head);
  USAGE_CHECK(m.head_size() % 2 == 0 && m.head_size() <= 1024,
              "rotary embeddings need an even head size of at most 1024, got {}", m.head_size());
  // The fused q/k/v and gate/up projections read adjacent tensors of the flat buffer as one
  // matrix, which 16-element alignment leaves adjacent when C is a multiple of 16.
  USAGE_CHECK(m.n_embd % 16 == 0, "model.n_embd ({}) must be a multiple of 16 for llama", m.n_embd);
  USAGE_CHECK(m.ffn_hidden >= 0 && m.ffn_multiple_of > 0,
              "model.ffn_hidden ({}) must be >= 0 and model.ffn_multiple_of ({}) positive",
              m.ffn_hidden, m.ffn_multiple_of);
  USAGE_CHECK(m.rope_theta > 1.0f, "model.rope_theta must exceed 1, got {}", m.rope_theta);
  USAGE_CHECK(m.rotary_pct == 1.0,
              "model.rotary_pct = {} needs model.arch = neox (Llama turns whole heads)",
              m.rotary_pct);
  // The stacked biases of a slice are adjacent when each is a whole number of 64-byte lines.
  const int64_t q_local = int64_t(m.n_head / m.tensor.degree) * m.head_size(),
                kv_local = int64_t(m.local_kv_heads()) * m.head_size();
  USAGE_CHECK(!has_qkv_bias(m) || (q_local % 16 == 0 && kv_local % 16 == 0),
              "model.arch = qwen2 needs the query ({}) and key/value ({}) channels of each "
              "tensor-parallel slice to be multiples of 16 (its q/k/v biases run as one)",
              q_local, kv_local);
}

// The SwiGLU hidden size F: model.ffn_hidden (or 8C/3) rounded up to model.ffn_multiple_of.
int64_t ffn_size(const ModelConfig& m) {
  const int64_t want = m.ffn_hidden > 0 ? m.ffn_hidden : 8 * int64_t(m.n_embd) / 3;
  return (want + m.ffn_multiple_of - 1) / m.ffn_multiple_of * m.ffn_multiple_of;
}

ArchSpec llama_spec(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, H = m.n_head, Ckv = m.kv_channels(),
                F = ffn_size(m), Q = m.attention_width(), hd = m.head_size();
  // Under tensor parallelism the key/value heads are cut with the queries' when the degree
  // divides them, else every rank holds them all (Note [Tensor-parallel splits]).
  const bool kv_whole = m.kv_heads_whole();
  const Split kv = kv_whole ? Split{-1, 1, true} : kRows;
  const int64_t kv_kept = kv_whole ? 2 * Ckv : 0;
  ArchSpec s;
  s.norm = NormKind::rmsnorm;
  s.block_prefix = "model.layers.";
  s.embedding = {
      {"model.embed_tokens.weight", Role::tok_embedding, {V, C}, false, Init::normal, {}, kRows}};
  s.block = {{"input_layernorm.weight", Role::norm1_w, {C}, false, Init::ones},
             {"self_attn.q_proj.weight", Role::q_w, {Q, C}, true, Init::normal, {}, kRows},
             {"self_attn.k_proj.weight", Role::k_w, {Ckv, C}, true, Init::normal, {}, kv},
             {"self_attn.v_proj.weight", Role::v_w, {Ckv, C}, true, Init::normal, {}, kv}};
  if (has_qkv_bias(m))  // adjacent, as the weights are: one product's bias
    s.block.insert(s.block.end(),
                   {{"self_attn.q_proj.bias", Role::q_b, {Q}, false, Init::zeros, {}, kRows},
                    {"self_attn.k_proj.bias", Role::k_b, {Ckv}, false, Init::zeros, {}, kv},
                    {"self_attn.v_proj.bias", Role::v_b, {Ckv}, false, Init::zeros, {}, kv}});
  if (has_head_norms(m))  // every rank holds them whole and norms its heads: partial gradients
    s.block.insert(
        s.block.end(),
        {{"self_attn.q_norm.weight", Role::q_norm_w, {hd}, false, Init::ones, {}, {-1, 1, true}},
         {"self_attn.k_norm.weight", Role::k_norm_w, {hd}, false, Init::ones, {}, {-1, 1, true}}});
  s.block.insert(
      s.block.end(),
      {{"self_attn.o_proj.weight",
        Role::attn_proj_w,
        {C, Q},
        true,
        Init::normal_residual,
        {},
        kCols},
       {"post_attention_layernorm.weight", Role::norm2_w, {C}, false, Init::ones},
       {"mlp.gate_proj.weight", Role::gate_w, {F, C}, true, Init::normal, {}, kRows},
       {"mlp.up_proj.weight", Role::up_w, {F, C}, true, Init::normal, {}, kRows},
       {"mlp.down_proj.weight", Role::down_w, {C, F}, true, Init::normal_residual, {}, kCols}});
  s.final = {{"model.norm.weight", Role::final_norm_w, {C}, false, Init::ones}};
  if (!m.tie_embeddings)
    s.final.push_back({"lm_head.weight", Role::lm_head, {V, C}, true, Init::normal, {}, kRows});
  using K = ActKind;
  const int64_t qkv = Q + 2 * Ckv;
  s.block_acts = {{Act::ln1, C, false, K::cheap},
                  {Act::ln1_rstd, 1, true, K::stat},
                  {Act::qkv, qkv, false, K::expensive, true, kv_kept},
                  {Act::atty, Q, false, K::expensive, true},
                  {Act::att_lse, H, true, K::stat, true},
                  {Act::res_mid, C, true, K::expensive},
                  {Act::ln2, C, false, K::cheap},
                  {Act::ln2_rstd, 1, true, K::stat},
                  {Act::gate_up, 2 * F, false, K::expensive, true},
                  {Act::swiglu, F, false, K::cheap, true},
                  {Act::d_qkv, qkv, false, K::scratch, true, kv_kept},
                  {Act::d_atty, Q, false, K::scratch, true},
                  {Act::d_gate_up, 2 * F, false, K::scratch, true},
                  {Act::d_swiglu, F, false, K::scratch, true}};
  if (has_head_norms(m)) {  // of the held key/value heads, only the one used is normed
    const int64_t kv_one = kv_whole ? hd : 0, heads_one = kv_whole ? 1 : 0;
    const int64_t Hkv = m.kv_heads();
    s.block_acts.insert(s.block_acts.end(),
                        {{Act::q_pre, Q, true, K::expensive, true},
                         {Act::k_pre, kv_whole ? hd : Ckv, true, K::expensive, true, kv_one},
                         {Act::q_rstd, H, true, K::stat, true},
                         {Act::k_rstd, kv_whole ? 1 : Hkv, true, K::stat, true, heads_one},
                         {Act::qk_out, Q + Ckv, false, K::work, true, kv_whole ? Ckv : 0},
                         {Act::qk_din, Q + Ckv, true, K::scratch, true, kv_whole ? Ckv : 0}});
  }
  s.block_matmuls = {{C, qkv, Parallel::column, Role::q_w, Role::kCount, kv_kept},
                     {Q, C, Parallel::row, Role::attn_proj_w},
                     {C, 2 * F, Parallel::column, Role::gate_w},
                     {F, C, Parallel::row, Role::down_w}};
  return s;
}

// `first` and the `more` tensors that follow it in the flat buffer, as one (rows, cols)
// matrix: the stacked q/k/v or gate/up weights (or their gradients); empty where they are
// (frozen weights' gradients: skips_weight_grad).
Tensor stacked(const Tensor& first, std::initializer_list<const Tensor*> more) {
  if (first.empty()) return {};
  Tensor t = first;
  const char* end = static_cast<const char*>(first.data) + first.bytes();
  for (const Tensor* m : more) {
    TRAINER_ASSERT(m->data == end && m->dim(1) == first.dim(1) && m->dtype == first.dtype,
                   "stacked weights are not adjacent");
    t.shape[0] += m->dim(0);
    end += m->bytes();
  }
  return t;
}

Tensor qkv_weight(const BlockTensors& t, const std::array<Tensor, size_t(Role::kCount)>& w) {
  return stacked(w[size_t(Role::q_w)], {&w[size_t(Role::k_w)], &w[size_t(Role::v_w)]});
}

Tensor gate_up_weight(const std::array<Tensor, size_t(Role::kCount)>& w) {
  return stacked(w[size_t(Role::gate_w)], {&w[size_t(Role::up_w)]});
}

// The q/k/v biases (or their gradients) as one vector, adjacent in the flat buffer; none
// without them.
Tensor qkv_bias(const BlockTensors& t, const std::array<Tensor, size_t(Role::kCount)>& b) {
  if (!has_qkv_bias(*t.model) || b[size_t(Role::q_b)].empty()) return {};
  const Tensor &q = b[size_t(Role::q_b)], &k = b[size_t(Role::k_b)], &v = b[size_t(Role::v_b)];
  const char* base = static_cast<const char*>(q.data);
  TRAINER_ASSERT(k.data == base + q.bytes() && v.data == base + q.bytes() + k.bytes() &&
                     k.dtype == q.dtype && v.dtype == q.dtype,
                 "stacked biases are not adjacent");
  Tensor all = q;
  all.shape[0] = q.numel() + k.numel() + v.numel();
  return all;
}

// The first `shape`'s elements of activation `a`'s buffer, as a contiguous tensor.
Tensor leading(const BlockTensors& t, Act a, std::initializer_list<int64_t> shape) {
  const Tensor all = A(t, a);
  Tensor x = make_tensor(all.data, all.dtype, shape, all.device);
  TRAINER_ASSERT(x.numel() <= all.numel(), "{} elements of a buffer of {}", x.numel(), all.numel());
  return x;
}

// Qwen3's norm of each head of x (B,T,width, a strided view of the q/k/v product) in place:
// RMSNorm over its head_size channels with weight `w`, its input kept in `pre` (fp32) and
// each head's rstd in `rstd` for backward.
void head_norm_forward(const Context& ctx, const BlockTensors& t, const Tensor& x, Act pre,
                       Act rstd, Role w) {
  const int64_t hd = t.model->head_size(), N = int64_t(t.B) * t.T, width = x.cols(),
                rows = N * (width / hd);
  const Tensor in = leading(t, pre, {N, width}), out = leading(t, Act::qk_out, {N, width});
  cast(ctx, in, x);
  rmsnorm_forward(ctx, out.reshape({rows, hd}), leading(t, rstd, {rows}), in.reshape({rows, hd}),
                  W(t, w), t.model->norm_eps);
  cast(ctx, x, out);
}

// Its backward: dx (the gradient at the normed heads, in place) becomes the gradient at their
// input; the weight's gradient adds every head's.
void head_norm_backward(const Context& ctx, const BlockTensors& t, const Tensor& dx, Act pre,
                        Act rstd, Role w) {
  const int64_t hd = t.model->head_size(), N = int64_t(t.B) * t.T, width = dx.cols(),
                rows = N * (width / hd);
  const Tensor dout = leading(t, Act::qk_out, {N, width}),
               din = leading(t, Act::qk_din, {N, width});
  cast(ctx, dout, dx);
  fill_zero(ctx, din);
  rmsnorm_backward(ctx, din.reshape({rows, hd}), G(t, w), dout.reshape({rows, hd}),
                   leading(t, pre, {rows, hd}), W(t, w), leading(t, rstd, {rows}));
  cast(ctx, dx, din);
}

void llama_block_forward(const Context& ctx, const BlockTensors& t, BlockPass pass) {
  using enum Act;
  using R = Role;
  if (pass == BlockPass::recompute_cheap) {
    rmsnorm_forward(ctx, A(t, ln1), A(t, ln1_rstd), t.x, W(t, R::norm1_w), t.model->norm_eps);
    rmsnorm_forward(ctx, A(t, ln2), A(t, ln2_rstd), A(t, res_mid), W(t, R::norm2_w),
                    t.model->norm_eps);
    swiglu_forward(ctx, A(t, swiglu), A(t, gate_up));
    return;
  }
  const int hs = t.model->head_size();
  rmsnorm_forward(ctx, A(t, ln1), A(t, ln1_rstd), t.x, W(t, R::norm1_w), t.model->norm_eps);
  product_forward(ctx, t, R::q_w, A(t, qkv), A(t, ln1), [&](auto& y, auto& x, auto&) {
    linear_forward(ctx, y, x, qkv_weight(t, t.w), qkv_bias(t, t.w), kOutIn);
  });
  const auto [q, k, v] = qkv_parts(t, A(t, qkv));
  if (has_head_norms(*t.model)) {
    head_norm_forward(ctx, t, q, q_pre, q_rstd, R::q_norm_w);
    head_norm_forward(ctx, t, k, k_pre, k_rstd, R::k_norm_w);
  }
  rope_forward(ctx, q, t.positions, hs, hs, t.model->rope());
  rope_forward(ctx, k, t.positions, hs, hs, t.model->rope());
  attend(ctx, t, q, k, v);
  product_forward(ctx, t, R::attn_proj_w, t.tmp, A(t, atty), [&](auto& y, auto& x, auto&) {
    linear_forward(ctx, y, x, W(t, R::attn_proj_w), {}, kOutIn);
  });
  drop_branch(ctx, t, Branch::attention);
  rmsnorm_residual_forward(ctx, A(t, res_mid), A(t, ln2), A(t, ln2_rstd), t.x, t.tmp,
                           W(t, R::norm2_w), t.model->norm_eps);
  product_forward(ctx, t, R::gate_w, A(t, gate_up), A(t, ln2), [&](auto& y, auto& x, auto&) {
    linear_forward(ctx, y, x, gate_up_weight(t.w), {}, kOutIn);
  });
  swiglu_forward(ctx, A(t, swiglu), A(t, gate_up));
  product_forward(ctx, t, R::down_w, t.tmp, A(t, swiglu), [&](auto& y, auto& x, auto&) {
    linear_forward(ctx, y, x, W(t, R::down_w), {}, kOutIn);
  });
  drop_branch(ctx, t, Branch::mlp);
  if (pass == BlockPass::train) residual_forward(ctx, t.out, A(t, res_mid), t.tmp);
}

void llama_block_backward(const Context& ctx, const BlockTensors& t) {
  using enum Act;
  using R = Role;
  const int hs = t.model->head_size();
  // MLP branch.
  product_backward(ctx, t, R::down_w, A(t, d_swiglu), branch_grad(ctx, t, Branch::mlp),
                   A(t, swiglu), [&](auto& dx, auto& dy, auto& x) {
                     linear_backward(ctx, dx, G(t, R::down_w), {}, dy, x, W(t, R::down_w), kOutIn);
                   });
  swiglu_backward(ctx, A(t, d_gate_up), A(t, d_swiglu), A(t, gate_up));
  product_backward(
      ctx, t, R::gate_w, t.d_ln, A(t, d_gate_up), A(t, ln2), [&](auto& dx, auto& dy, auto& x) {
        linear_backward(ctx, dx, gate_up_weight(t.g), {}, dy, x, gate_up_weight(t.w), kOutIn);
      });
  rmsnorm_backward(ctx, t.d_res, G(t, R::norm2_w), t.d_ln, A(t, res_mid), W(t, R::norm2_w),
                   A(t, ln2_rstd));
  // Attention branch.
  product_backward(ctx, t, R::attn_proj_w, A(t, d_atty), branch_grad(ctx, t, Branch::attention),
                   A(t, atty), [&](auto& dx, auto& dy, auto& x) {
                     linear_backward(ctx, dx, G(t, R::attn_proj_w), {}, dy, x, W(t, R::attn_proj_w),
                                     kOutIn);
                   });
  const std::array<Tensor, 3> d = qkv_parts(t, A(t, d_qkv));
  attend_backward(ctx, t, d, qkv_parts(t, A(t, qkv)));
  const Tensor &dq = d[0], &dk = d[1];
  rope_backward(ctx, dq, t.positions, hs, hs, t.model->rope());
  rope_backward(ctx, dk, t.positions, hs, hs, t.model->rope());
  if (has_head_norms(*t.model)) {
    head_norm_backward(ctx, t, dq, q_pre, q_rstd, R::q_norm_w);
    head_norm_backward(ctx, t, dk, k_pre, k_rstd, R::k_norm_w);
  }
  product_backward(ctx, t, R::q_w, t.d_ln, A(t, d_qkv), A(t, ln1),
                   [&](auto& dx, auto& dy, auto& x) {
                     linear_backward(ctx, dx, qkv_weight(t, t.g), qkv_bias(t, t.g), dy, x,
                                     qkv_weight(t, t.w), kOutIn);
                   });
  rmsnorm_backward(ctx, t.d_res, G(t, R::norm1_w), t.d_ln, t.x, W(t, R::norm1_w), A(t, ln1_rstd));
}

nlohmann::json llama_hf_config(const ModelConfig& m) {
  nlohmann::json j = {{"model_type", "llama"},
                      {"architectures", {"LlamaForCausalLM"}},
                      {"vocab_size", m.vocab_size},
                      {"max_position_embeddings", m.max_seq_len},
                      {"hidden_size", m.n_embd},
                      {"intermediate_size", ffn_size(m)},
                      {"num_hidden_layers", m.n_layer},
                      {"num_attention_heads", m.n_head},
                      {"num_key_value_heads", m.kv_heads()},
                      {"head_dim", m.head_size()},
                      {"hidden_act", "silu"},
                      {"rms_norm_eps", as_decimal(m.norm_eps)},
                      {"rope_theta", m.rope_theta},
                      {"rope_scaling", hf_rope_scaling_json(m)},
                      {"attention_bias", false},
                      {"mlp_bias", false},
                      {"tie_word_embeddings", m.tie_embeddings}};
  if (has_head_norms(m)) {  // Qwen3Config: attention_bias (false), no mlp_bias
    j.erase("mlp_bias");
    j["model_type"] = "qwen3";
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["use_sliding_window"] = false;
  }
  if (!has_qkv_bias(m)) return j;
  // Qwen2Config: no head_dim or bias switches (its q/k/v biases always, no others).
  for (const char* f : {"head_dim", "attention_bias", "mlp_bias"}) j.erase(f);
  j["model_type"] = "qwen2";
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["use_sliding_window"] = false;
  return j;
}

// Where LlamaConfig, Qwen2Config, Qwen3Config and MistralConfig default differently.
struct HfDefaults {
  int64_t vocab, context, width, ffn, layers, heads;
  std::optional<int64_t> kv_heads;  // none: as many as heads
  double eps;
  std::optional<int64_t> head_dim = {};  // none: hidden_size / num_attention_heads
};
constexpr HfDefaults kLlamaDefaults{32000, 2048, 4096, 11008, 32, 32, {}, 1e-6};
constexpr HfDefaults kQwen2Defaults{151936, 32768, 4096, 22016, 32, 32, {}, 1e-6};
constexpr HfDefaults kQwen3Defaults{151936, 32768, 4096, 22016, 32, 32, {}, 1e-6, 128};
constexpr HfDefaults kMistralDefaults{32000, 4096 * 32, 4096, 14336, 32, 32, 8, 1e-6};

// The fields the three configs share (`d`'s defaults where absent).
ModelConfig llama_family_from_hf(HfConfigReader& hf, const HfDefaults& d) {
  ModelConfig m;
  m.vocab_size = int(hf.integer("vocab_size", d.vocab));
  m.max_seq_len = int(hf.integer("max_position_embeddings", d.context));
  m.n_embd = int(hf.integer("hidden_size", d.width));
  m.n_layer = int(hf.integer("num_hidden_layers", d.layers));
  m.n_head = int(hf.integer("num_attention_heads", d.heads));
  m.n_kv_head = int(hf.integer("num_key_value_heads", d.kv_heads.value_or(m.n_head)));
  m.ffn_hidden = int(hf.integer("intermediate_size", d.ffn));
  m.ffn_multiple_of = 1;  // the hidden size as given
  m.rope_theta = float(hf.real("rope_theta", 10000.0));
  hf_rope_scaling(hf, m);
  m.norm_eps = float(hf.real("rms_norm_eps", d.eps));
  m.tie_embeddings = hf.boolean("tie_word_embeddings", false);
  USAGE_CHECK(m.n_head > 0, "{}: num_attention_heads {} is not positive", hf.file().string(),
              m.n_head);
  hf.expect("hidden_act", "silu", {"silu"}, "SwiGLU (silu)");
  return m;
}

// head_dim (absent: d's, or hidden_size / num_attention_heads), kept only where it differs
// from the latter.
void read_head_dim(HfConfigReader& hf, ModelConfig& m, const HfDefaults& d) {
  const int64_t fallback = m.n_embd % m.n_head == 0 ? m.n_embd / m.n_head : 0;
  const int64_t hd = hf.integer("head_dim", d.head_dim.value_or(fallback));
  USAGE_CHECK(hd > 0,
              "{}: hidden_size {} is not a multiple of num_attention_heads {} and no "
              "head_dim is given",
              hf.file().string(), m.n_embd, m.n_head);
  m.head_dim = hd == fallback ? 0 : int(hd);
}

// LlamaConfig's fields (its defaults where absent).
ModelConfig llama_from_hf(HfConfigReader& hf) {
  ModelConfig m = llama_family_from_hf(hf, kLlamaDefaults);
  read_head_dim(hf, m, kLlamaDefaults);
  hf.expect("attention_bias", false, {false}, "projections without biases");
  hf.expect("mlp_bias", false, {false}, "projections without biases");
  hf.ignore({"pretraining_tp"});  // how Meta's code cut the products: the same sums
  // nanotron's, in SmolLM2's configs; transformers reads neither and pairs rotary channels by
  // rotate-half whatever rope_interleaved says, as the trainer does.
  hf.ignore({"is_llama_config", "rope_interleaved"});
  return m;
}

// Qwen2Config's fields (its defaults where absent). A sliding window is refused: with
// use_sliding_window false (every released Qwen2 and Qwen2.5), sliding_window and
// max_window_layers change nothing.
ModelConfig qwen2_from_hf(HfConfigReader& hf) {
  ModelConfig m = llama_family_from_hf(hf, kQwen2Defaults);
  USAGE_CHECK(m.n_embd % m.n_head == 0,
              "{}: hidden_size {} is not a multiple of num_attention_heads {}", hf.file().string(),
              m.n_embd, m.n_head);
  hf.expect("use_sliding_window", false, {false}, "full attention in every layer");
  hf.ignore({"sliding_window", "max_window_layers", "layer_types"});
  return m;
}

// Qwen3Config's fields (its defaults where absent: head_dim 128), with Qwen2's window rule.
ModelConfig qwen3_from_hf(HfConfigReader& hf) {
  ModelConfig m = llama_family_from_hf(hf, kQwen3Defaults);
  read_head_dim(hf, m, kQwen3Defaults);
  hf.expect("attention_bias", false, {false}, "projections without biases");
  hf.expect("use_sliding_window", false, {false}, "full attention in every layer");
  hf.ignore({"sliding_window", "max_window_layers", "layer_types"});
  return m;
}

// MistralConfig's fields (its defaults where absent), as the Llama they describe: attention
// within a sliding window of W positions is full causal attention for rows of at most W
// tokens, so the model's context is cut to W (a longer data.seq_len is then refused). A null
// window (Mistral 7B v0.2 on) is none.
ModelConfig mistral_from_hf(HfConfigReader& hf) {
  ModelConfig m = llama_family_from_hf(hf, kMistralDefaults);
  read_head_dim(hf, m, kMistralDefaults);
  const bool no_window = hf.is_null("sliding_window");
  const int64_t window = hf.integer("sliding_window", 4096);
  if (!no_window) m.max_seq_len = int(std::min<int64_t>(m.max_seq_len, window));
  return m;
}

}  // namespace

// PEFT's target names of a Llama's seven projections; q/k/v and gate/up run stacked, so their
// adapters add to their product's columns.
const std::vector<Adapter> kLlamaLoraTargets = {
    {"q", Role::q_w, Role::q_w, Role::lora_q_a, Role::lora_q_b},
    {"k", Role::q_w, Role::k_w, Role::lora_k_a, Role::lora_k_b},
    {"v", Role::q_w, Role::v_w, Role::lora_v_a, Role::lora_v_b},
    {"o", Role::attn_proj_w, Role::attn_proj_w, Role::lora_o_a, Role::lora_o_b},
    {"gate", Role::gate_w, Role::gate_w, Role::lora_gate_a, Role::lora_gate_b},
    {"up", Role::gate_w, Role::up_w, Role::lora_up_a, Role::lora_up_b},
    {"down", Role::down_w, Role::down_w, Role::lora_down_a, Role::lora_down_b}};

// Llama's, Qwen's and Mistral's one dropout: on the attention probabilities.
const std::vector<HfDropout> kLlamaDropouts = {
    {"attention_dropout", &DropoutRates::attention, 0.0}};

extern const Architecture kLlama = {
    "llama",
    "rotary positions, RMSNorm, SwiGLU, no biases, grouped-query attention, tied or untied head",
    llama_spec,
    llama_validate,
    llama_block_forward,
    llama_block_backward,
    "LlamaForCausalLM",
    "llama",
    llama_hf_config,
    llama_from_hf,
    "",
    {".rotary_emb.inv_freq", "lm_head.weight"},
    kLlamaDropouts,
    {{"MistralForCausalLM", "mistral", mistral_from_hf}},
    kLlamaLoraTargets};

extern const Architecture kQwen2 = {
    "qwen2",
    "Qwen2 and Qwen2.5: Llama with biases on the q, k and v projections",
    llama_spec,
    llama_validate,
    llama_block_forward,
    llama_block_backward,
    "Qwen2ForCausalLM",
    "qwen2",
    llama_hf_config,
    qwen2_from_hf,
    "",
    {".rotary_emb.inv_freq", "lm_head.weight"},
    kLlamaDropouts,
    {},
    kLlamaLoraTargets};

extern const Architecture kQwen3 = {
    "qwen3",
    "Qwen3: Llama with an RMSNorm of each query and key head, and head_dim channels a head",
    llama_spec,
    llama_validate,
    llama_block_forward,
    llama_block_backward,
    "Qwen3ForCausalLM",
    "qwen3",
    llama_hf_config,
    qwen3_from_hf,
    "",
    {".rotary_emb.inv_freq", "lm_head.weight"},
    kLlamaDropouts,
    {},
    kLlamaLoraTargets};

}  // namespace trainer::nn
