// The model's passes: a pipeline stage's chunks (the whole model is one), and generation's
// cached forward; the model's state, batch loading and scalars are transformer.cpp's.
// See transformer.h.
#include <vector>

#include "nn/kv_cache.h"
#include "nn/lora.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/dropout.h"
#include "nn/ops/embedding.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
#include "nn/transformer.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/memory.h"
#include "runtime/profile.h"

namespace trainer::nn {

// The whole model is one chunk: its passes are that chunk's.
int64_t Transformer::forward(const BatchView& batch) {
  TRAINER_ASSERT(config_.pipeline.whole(), "a whole-model forward on a pipeline stage");
  const int64_t counted = copy_batch(batch, 0);
  forward_chunk(0);
  return counted;
}

void Transformer::backward(float loss_scale) {
  TRAINER_ASSERT(config_.pipeline.whole(), "a whole-model backward on a pipeline stage");
  backward_chunk(0, loss_scale);
}

bool Transformer::graphs_allowed() const {
  // A graph would replay its first micro-batch's dropout keys (Note [Dropout]).
  if (!exec_.cuda_graphs || mb_.has_segments || mb_.dropout_key || profile::g_enabled) return false;
  TRAINER_ASSERT(!store_ && !group_ && exec_.device == Device::cuda,
                 "CUDA graphs of a sharded, tensor-parallel or CPU model");
  return true;
}

void Transformer::segment(bool backward, int unit, const std::function<void()>& work) {
  if (!graphed_) return work();
  graphs_.run({.backward = backward,
               .unit = unit,
               .rows = mb_.B,
               .seq_len = mb_.T,
               .targets = mb_.has_targets,
               .lengths = mb_.has_lengths},
              ctx_.stream, work);
}

void Transformer::forward_cached(const int32_t* tokens, int count, KvCache& cache) {
  TRAINER_ASSERT(cache.layers_ == config_.n_layer && cache.P_ == config_.max_seq_len &&
                     cache.C_ == config_.kv_channels() && cache.dtype_ == exec_.compute,
                 "a KV cache of another model");
  TRAINER_ASSERT(config_.tensor.degree == 1, "decoding with a tensor-parallel slice");
  CHECK(count > 0 && cache.length() + count <= config_.max_seq_len,
        "the sequence is full ({} positions, model.max_seq_len)", config_.max_seq_len);
  copy_batch({1, count, tokens, nullptr, nullptr, nullptr}, cache.length());
  graphed_ = false;
  embedding_forward_pass();
  blocks_forward(0, config_.n_layer, &cache);
  head_forward_pass();
  cache.length_ += count;
}

void Transformer::embedding_forward_pass() {
  const int E = layout_.embedding_unit();
  const int64_t N = int64_t(mb_.B) * mb_.T;
  const Tensor we = unit_weights(E, ParamUse::forward);
  TensorGroup* const g = group();
  segment(false, E, [&] {
    // Vocabulary-parallel: each rank adds the rows of its slice (and rank 0 the positions),
    // summed over the group (into each rank's tokens under sequence parallelism).
    const bool positions = layout_.has(E, Role::pos_embedding) && (!g || g->rank() == 0);
    const bool sliced = config_.sequence_slices() > 1;
    const Tensor x = act(plan_.input(0)), all = sliced ? all_tokens(plan_.partial, x.dtype) : x;
    embedding_forward(ctx_, all, mb_.tokens.view(DType::i32, N), mb_.positions.view(DType::i32, N),
                      param(we, E, Role::tok_embedding),
                      positions ? param(we, E, Role::pos_embedding) : Tensor{},
                      config_.vocab_begin());
    if (sliced)
      g->reduce_scatter(x, all);
    else if (g)
      g->all_reduce(x);
    if (const DropoutMask drop = stream_dropout(0, DropSite::embedding, config_.dropout.embedding);
        drop.on())
      dropout(ctx_, x, x, drop);
  });
}

void Transformer::blocks_forward(int begin, int end, KvCache* cache) {
  for (int l = begin; l < end; ++l) {
    BlockTensors t = block_tensors(l, ParamUse::forward);
    if (cache) {
      t.k_cache = cache->keys(l);
      t.v_cache = cache->values(l);
      t.q_pos = cache->length();
    }
    segment(false, layout_.block_unit(l), [&] { arch_.block_forward(ctx_, t, BlockPass::train); });
  }
}

void Transformer::head_forward_pass() {
  const int F = layout_.final_unit(), last = chunks_.back().second - 1;
  const Tensor wf = unit_weights(F, ParamUse::forward);
  const Tensor head = head_weight(wf, ParamUse::forward);
  segment(false, F, [&] {
    if (spec_.norm == NormKind::rmsnorm)
      rmsnorm_forward(ctx_, act(plan_.lnf), act(plan_.lnf_rstd), act(plan_.output(last)),
                      param(wf, F, Role::final_norm_w), config_.norm_eps);
    else
      layernorm_forward(ctx_, act(plan_.lnf), act(plan_.lnf_mean), act(plan_.lnf_rstd),
                        act(plan_.output(last)), param(wf, F, Role::final_norm_w),
                        param(wf, F, Role::final_norm_b), config_.norm_eps);
    {
      PROFILE_SCOPE("lm_head_forward", "gemm");
      matmul(ctx_, logits(), gathered(plan_.lnf), false, head, true);
    }
    if (mb_.has_targets) loss_forward();
  });
}

void Transformer::set_loss_scale(float loss_scale) {
  if (scale_upload_) scale_upload_->begin();
  put(scale_upload_.get(), loss_scale_, &loss_scale, DType::f32, 1);
  if (scale_upload_) scale_upload_->end(ctx_.stream);
}

// From the loss to d_res at the final norm's input; the final unit's gradient is then ready
// (the tied embedding's only once its own backward adds to it).
void Transformer::head_backward_pass() {
  const int E = layout_.embedding_unit(), F = layout_.final_unit(),
            last = chunks_.back().second - 1;
  const int64_t N = int64_t(mb_.B) * mb_.T;
  const Tensor wf = unit_weights(F, ParamUse::backward);
  const Tensor head = head_weight(wf, ParamUse::backward);
  const Tensor gf = unit_grads(F);
  const Tensor dhead =
      tied() ? param(unit_grads(E), E, Role::tok_embedding) : param(gf, F, Role::lm_head);
  segment(true, F, [&] {
    const Tensor dlogits = logits();  // overwrites the logits in place
    cross_entropy_backward(ctx_, dlogits, logits(), act(plan_.ce_stats),
                           mb_.targets.view(DType::i32, N), loss_scale_.view(DType::f32, 1),
                           config_.vocab_begin());
    const bool sliced = config_.sequence_slices() > 1;
    const Tensor d_ln = act(plan_.d_ln),
                 d_all = sliced ? all_tokens(plan_.partial, d_ln.dtype) : d_ln;
    {
      // Through the head (V, C): d lnf = dlogits @ head; d head += dlogits^T @ lnf.
      PROFILE_SCOPE("lm_head_backward", "gemm");
      matmul(ctx_, d_all, dlogits, false, head, false);
      if (!skips_weight_grad(config_, tied() ? Role::tok_embedding : Role::lm_head))
        matmul(ctx_, dhead, dlogits, true, gathered(plan_.lnf), false, 1.0f, 1.0f);
    }
    // Each vocabulary slice's part of d lnf, summed (into each rank's tokens, sliced).
    if (sliced)
      group()->reduce_scatter(d_ln, d_all);
    else if (TensorGroup* g = group())
      g->all_reduce(d_ln);
    std::vector<Tensor> partial;
    for (Role r : {Role::final_norm_w, Role::final_norm_b})
      if (layout_.has(F, r) && partial_grad(F, r)) partial.push_back(param(gf, F, r));
    sum_partial_grads(partial, [&] {
      fill_zero(ctx_, act(plan_.d_res));
      if (spec_.norm == NormKind::rmsnorm)
        rmsnorm_backward(ctx_, act(plan_.d_res), param(gf, F, Role::final_norm_w), act(plan_.d_ln),
                         act(plan_.output(last)), param(wf, F, Role::final_norm_w),
                         act(plan_.lnf_rstd));
      else
        layernorm_backward(ctx_, act(plan_.d_res), param(gf, F, Role::final_norm_w),
                           param(gf, F, Role::final_norm_b), act(plan_.d_ln),
                           act(plan_.output(last)), param(wf, F, Role::final_norm_w),
                           act(plan_.lnf_mean), act(plan_.lnf_rstd));
    });
  });
  unit_ready(F);
}

// From d_res at the first block's input into the embedding's gradient, then ready.
void Transformer::embedding_backward_pass() {
  const int E = layout_.embedding_unit();
  const int64_t N = int64_t(mb_.B) * mb_.T;
  const Tensor ge = unit_grads(E);
  if (skips_weight_grad(config_, Role::tok_embedding)) return unit_ready(E);
  segment(true, E, [&] {
    // Every token's gradient reaches every vocabulary slice (gathered, sliced).
    const Tensor d_res = act(plan_.d_res);
    // Through the embedding's dropout (in place: nothing reads d_res after this pass).
    if (const DropoutMask drop = stream_dropout(0, DropSite::embedding, config_.dropout.embedding);
        drop.on())
      dropout(ctx_, d_res, d_res, drop);
    Tensor d_all = d_res;
    if (config_.sequence_slices() > 1) {
      d_all = all_tokens(plan_.partial, DType::f32);
      group()->all_gather(d_all, d_res);
    }
    embedding_backward(
        ctx_, param(ge, E, Role::tok_embedding),
        layout_.has(E, Role::pos_embedding) ? param(ge, E, Role::pos_embedding) : Tensor{}, d_all,
        mb_.tokens.view(DType::i32, N), mb_.positions.view(DType::i32, N), config_.vocab_begin());
  });
  unit_ready(E);
}

// A pipeline stage's chunks (Note [Pipeline stages] in transformer.cpp), or the whole model's
// one; CUDA graphs replay the whole model's passes only.
void Transformer::forward_chunk(int chunk) {
  const auto [begin, end] = chunks_[size_t(chunk)];
  graphed_ = config_.pipeline.whole() && graphs_allowed();
  if (chunk == 0 && config_.pipeline.first) embedding_forward_pass();
  blocks_forward(begin, end, nullptr);
  if (chunk + 1 == int(chunks_.size()) && config_.holds_head()) head_forward_pass();
}

void Transformer::backward_chunk(int chunk, float loss_scale) {
  TRAINER_ASSERT(exec_.training, "backward of a forward-only model");
  const auto [begin, end] = chunks_[size_t(chunk)];
  graphed_ = config_.pipeline.whole() && graphs_allowed();
  const bool head = chunk + 1 == int(chunks_.size()) && config_.holds_head();
  if (head) {
    TRAINER_ASSERT(mb_.has_targets, "backward of a forward without targets");
    set_loss_scale(loss_scale);
    head_backward_pass();
  }
  for (int l = end - 1; l >= begin; --l) {
    backward_block(l);
    unit_ready(layout_.block_unit(l));
  }
  if (chunk == 0 && config_.pipeline.first)
    embedding_backward_pass();
  else if (head && tied())  // the last stage's share of the tied embedding's gradient
    unit_ready(layout_.embedding_unit());
}

Tensor Transformer::chunk_input(int chunk) {
  return act(plan_.input(chunks_[size_t(chunk)].first));
}

Tensor Transformer::chunk_output(int chunk) {
  return act(plan_.output(chunks_[size_t(chunk)].second - 1));
}

int64_t Transformer::residual_numel(const BatchView& batch) const {
  const ActSlot& residual = plan_.input(chunks_.front().first);
  return rows(residual, batch.B, batch.T) * residual.per_token;
}

Tensor Transformer::residual_grad() {
  return act(plan_.d_res);
}

// On entry d_res holds the gradient of the block's output; on exit, of its input.
void Transformer::backward_block(int l) {
  const BlockTensors t = block_tensors(l, ParamUse::backward);
  segment(true, layout_.block_unit(l), [&] {
    switch (exec_.policy(l)) {
      case Recompute::none:
        break;
      case Recompute::selective: {
        PROFILE_SCOPE("recompute", "other");
        arch_.block_forward(ctx_, t, BlockPass::recompute_cheap);
        break;
      }
      case Recompute::full: {
        PROFILE_SCOPE("recompute", "other");
        arch_.block_forward(ctx_, t, BlockPass::recompute_all);
        break;
      }
    }
    std::vector<Tensor> partial;
    const int u = layout_.block_unit(l);
    for (size_t r = 0; r < size_t(Role::kCount); ++r)
      if (!t.g[r].empty() && partial_grad(u, Role(r))) partial.push_back(t.g[r]);
    sum_partial_grads(partial, [&] { arch_.block_backward(ctx_, t); });
  });
}

}  // namespace trainer::nn
