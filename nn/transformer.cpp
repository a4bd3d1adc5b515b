#include "nn/transformer.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "nn/kv_cache.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/sum_squares.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/memory.h"
#include "runtime/profile.h"
#include "runtime/rng.h"

namespace trainer::nn {

Context context_for(const ExecConfig& e) {
  Context c;
  c.device = e.device;
  c.device_index = e.device_index;
  c.stream = e.stream;
  c.bf16_math = e.cpu_bf16 ? *e.cpu_bf16 : detect_cpu_bf16_math();
  c.cudnn_attention = e.cudnn_attention;
  c.threads = omp_get_max_threads();  // fixed for the model's life: its workspace is sized so
  c.deterministic = e.deterministic;
  return c;
}

namespace {

// A view of `flat` elements [offset, offset + numel) with the given shape.
Tensor shaped(const Tensor& flat, int64_t offset, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  Tensor t = flat.flat(offset, numel);
  TRAINER_ASSERT(shape.size() <= size_t(Tensor::kMaxDims), "{}-d parameter", shape.size());
  t.ndim = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  return t;
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, const ExecConfig& exec)
    : config_(config),
      exec_(exec),
      chunks_(config.held_chunks()),
      arch_(config.architecture()),
      spec_(arch_.spec(config)),
      layout_(config),
      plan_(config, (exec.validate(config), exec)),  // validated before anything is sized
      ctx_(context_for(exec)),
      graphs_(size_t(16) * size_t(config.n_layer + 2)) {  // 8 shapes, 2 passes, every unit
  const Memory mem = planned_memory(config, exec);
  const Device dev = exec.device;
  workspace_ = Workspace(size_t(mem.workspace), dev);
  ctx_.workspace = &workspace_;
  params_ = Buffer(size_t(mem.params), dev);
  working_ = Buffer(size_t(mem.working), dev);
  grads_ = Buffer(size_t(mem.grads), dev);
  const size_t N = size_t(plan_.capacity());
  TRAINER_ASSERT(exec.activation_slots >= 1, "{} activation slots", exec.activation_slots);
  slots_.resize(size_t(exec.activation_slots));
  for (MicroBatchState& s : slots_) {
    s.acts = Buffer(size_t(plan_.slot_bytes()), dev);
    for (Buffer* b : {&s.tokens, &s.targets, &s.positions, &s.segments, &s.lengths})
      *b = Buffer(N * sizeof(int32_t), dev);
    s.runs = Buffer((N + 1) * sizeof(int32_t), dev);
  }
  std::swap(mb_, slots_[0]);
  scratch_ = Buffer(size_t(plan_.bytes() - plan_.slot_bytes()), dev);
  loss_scale_ = Buffer(sizeof(float), dev);
  scalars_ = Buffer(2 * sizeof(double), dev);
  host_positions_.resize(N);
  if (dev == Device::cuda) {  // Note [Batch upload]: 4 of N values, the runs, up to N lengths
    upload_ = std::make_unique<PinnedUpload>((6 * N + 1) * sizeof(int32_t));
    scale_upload_ = std::make_unique<PinnedUpload>(sizeof(float));
  }
}

Transformer::Memory Transformer::memory() const {
  int64_t acts = int64_t(scratch_.bytes()),
          inputs = int64_t(loss_scale_.bytes() + scalars_.bytes());
  auto count = [&](const MicroBatchState& s) {  // the selected slot's entry is empty
    acts += int64_t(s.acts.bytes());
    for (const Buffer* b : {&s.tokens, &s.targets, &s.positions, &s.segments, &s.lengths, &s.runs})
      inputs += int64_t(b->bytes());
  };
  count(mb_);
  for (const MicroBatchState& s : slots_) count(s);
  return {int64_t(params_.bytes()),       int64_t(working_.bytes()),
          int64_t(grads_.bytes()),        acts,
          int64_t(workspace_.capacity()), inputs};
}

void Transformer::select_slot(int slot) {
  TRAINER_ASSERT(slot >= 0 && slot < int(slots_.size()), "slot {} of {}", slot, slots_.size());
  if (slot == slot_) return;
  std::swap(mb_, slots_[size_t(slot_)]);  // the selected state back to its place
  std::swap(mb_, slots_[size_t(slot)]);
  slot_ = slot;
}

void Transformer::init_weights(uint64_t seed) {
  TRAINER_ASSERT(exec_.own_params, "init_weights on a model whose weights a UnitStore holds");
  std::vector<float> host;
  for (const ParamInfo& p : layout_.params())
    for_each_piece(p.numel, [&](int64_t b, int64_t e) {
      host.resize(size_t(e - b));
      init_param(p, seed, b, e, host.data());
      copy(ctx_, params().flat(p.offset + b, e - b), make_tensor(host.data(), DType::f32, {e - b}));
    });
  sync_working_params();
}

Tensor Transformer::params() {
  return params_.bytes() ? params_.view(DType::f32, layout_.total()) : Tensor{};
}

Tensor Transformer::grads() {
  TRAINER_ASSERT(exec_.training, "gradients of a forward-only model");
  return grads_.bytes() ? grads_.view(exec_.grad, layout_.total()) : Tensor{};
}

Tensor Transformer::working_copy() {
  return working_.bytes() ? working_.view(exec_.compute, layout_.total()) : Tensor{};
}

Tensor Transformer::working_params() {
  return working_.bytes() ? working_copy() : params();
}

void Transformer::sync_working_params() {
  if (working_.bytes()) cast(ctx_, working_params(), params());
}

Tensor Transformer::act(const ActSlot& slot) const {
  TRAINER_ASSERT(slot.offset >= 0, "an activation without a slot");
  const int64_t N = int64_t(mb_.B) * mb_.T / (slot.sliced ? config_.sequence_slices() : 1);
  const int64_t kept = plan_.slot_bytes();  // Note [Activation memory]
  char* at = slot.offset < kept ? static_cast<char*>(mb_.acts.data()) + slot.offset
                                : static_cast<char*>(scratch_.data()) + (slot.offset - kept);
  return make_tensor(at, slot.dtype, {N, slot.per_token}, exec_.device);
}

Tensor Transformer::logits() const {
  return act(plan_.logits);
}

Tensor Transformer::unit_weights(int unit, ParamUse use) {
  if (store_) return store_->weights(unit, use);
  TRAINER_ASSERT(exec_.own_params, "a model without weights of its own needs a UnitStore");
  if (params_needed_) params_needed_(unit, use);
  const Unit& u = layout_.units()[size_t(unit)];
  return working_params().flat(u.begin, u.end - u.begin);
}

Tensor Transformer::unit_grads(int unit) {
  if (store_) return store_->grads(unit);
  const Unit& u = layout_.units()[size_t(unit)];
  return grads().flat(u.begin, u.end - u.begin);
}

void Transformer::unit_ready(int unit) {
  if (store_) return store_->grads_ready(unit);
  const Unit& u = layout_.units()[size_t(unit)];
  if (grads_ready_) grads_ready_(u.begin, u.end);
}

// A pipeline stage's passes read the units it holds in the same order, by chunk.
std::vector<int> Transformer::weight_schedule(ParamUse use) const {
  const int E = layout_.embedding_unit(), F = layout_.final_unit();
  const bool first = config_.pipeline.first;
  std::vector<int> units;
  if (use == ParamUse::forward) {  // forward_blocks_and_head
    if (first) units.push_back(E);
    for (int l : config_.held_layers()) units.push_back(layout_.block_unit(l));
    if (F >= 0) units.push_back(F);
    if (F >= 0 && tied()) units.push_back(E);
    return units;
  }
  if (F >= 0) units.push_back(F);  // backward: the head and the final norm, then the blocks
  if (F >= 0 && tied()) units.push_back(E);
  const std::vector<int> layers = config_.held_layers();
  for (auto l = layers.rbegin(); l != layers.rend(); ++l) units.push_back(layout_.block_unit(*l));
  return units;
}

bool Transformer::tied() const {
  return config_.tie_embeddings;
}

// The head's (V, C) weight: the token embedding (the embedding unit, read again) or the final
// unit's own; `final_weights` are the final unit's, already asked for.
Tensor Transformer::head_weight(const Tensor& final_weights, ParamUse use) {
  const int E = layout_.embedding_unit(), F = layout_.final_unit();
  if (!tied()) return param(final_weights, F, Role::lm_head);
  return param(unit_weights(E, use), E, Role::tok_embedding);
}

Tensor Transformer::param(const Tensor& unit_tensor, int unit, Role role) const {
  const ParamInfo& p = layout_.get(unit, role);
  return shaped(unit_tensor, p.offset - layout_.units()[size_t(unit)].begin, p.shape);
}

BlockTensors Transformer::block_tensors(int l, ParamUse use) {
  BlockTensors t;
  t.B = mb_.B;
  t.T = mb_.T;
  t.model = &config_;
  t.n_head = config_.local_heads();
  t.group = group();
  t.positions = mb_.positions.view(DType::i32, int64_t(mb_.B) * mb_.T);
  const int u = layout_.block_unit(l);
  const Tensor w = unit_weights(u, use);
  const Tensor g = use == ParamUse::backward ? unit_grads(u) : Tensor{};
  for (size_t r = 0; r < size_t(Role::kCount); ++r)
    if (layout_.has(u, Role(r))) {
      t.w[r] = param(w, u, Role(r));
      if (!g.empty()) t.g[r] = param(g, u, Role(r));
    }
  for (const ActSpec& a : spec_.block_acts)
    if (exec_.training || a.kind != ActKind::scratch)
      t.a[size_t(a.act)] = act(plan_.block(l, a.act));
  t.x = act(plan_.input(l));
  t.out = act(plan_.output(l));
  t.tmp = act(plan_.tmp);
  if (config_.sequence_slices() > 1) {
    t.gathered = act(plan_.gathered);
    t.partial = act(plan_.partial);
  }
  if (exec_.training) {
    t.d_res = act(plan_.d_res);
    t.d_ln = act(plan_.d_ln);
  }
  if (plan_.d_branch.offset >= 0) t.d_branch = act(plan_.d_branch);
  const int64_t N = int64_t(mb_.B) * mb_.T;
  if (mb_.has_segments) t.mask.segments = mb_.segments.view(DType::i32, N).reshape({mb_.B, mb_.T});
  if (mb_.runs_count > 0) t.mask.runs = mb_.runs.view(DType::i32, mb_.runs_count + 1);
  if (mb_.has_lengths) t.mask.lengths = mb_.lengths.view(DType::i32, mb_.B);
  return t;
}

int64_t Transformer::stage_batch(const BatchView& b, int first_position) {
  CHECK(b.B > 0 && b.T > 0, "empty batch ({} x {})", b.B, b.T);
  CHECK(int64_t(b.B) * b.T <= plan_.capacity() && b.T <= exec_.max_seq_len,
        "batch {} x {} exceeds the {} x {} the model was sized for", b.B, b.T, exec_.max_rows,
        exec_.max_seq_len);
  const int64_t N = int64_t(b.B) * b.T;
  CHECK(N % config_.sequence_slices() == 0,
        "a batch of {} x {} tokens does not cut into dist.sequence_parallel's {} equal slices "
        "(make data.batch_size x the sequence length a multiple of dist.tensor_parallel)",
        b.B, b.T, config_.sequence_slices());
  const int V = config_.vocab_size;
  for (int64_t n = 0; n < N; ++n)
    CHECK(b.tokens[n] >= 0 && b.tokens[n] < V,
          "token id {} at position {} is outside the vocab [0, {})", b.tokens[n], n, V);
  int64_t counted = 0;
  if (b.targets)
    for (int64_t n = 0; n < N; ++n) {
      CHECK(b.targets[n] >= -1 && b.targets[n] < V,
            "target id {} at position {} is outside the vocab [0, {})", b.targets[n], n, V);
      counted += b.targets[n] >= 0;
    }
  if (b.lengths)
    for (int r = 0; r < b.B; ++r)
      CHECK(b.lengths[r] >= 0 && b.lengths[r] <= b.T, "row {} has length {}, outside [0, {}]", r,
            b.lengths[r], b.T);
  // Positions count from each row's start (or first_position), restarting where the segment id
  // changes.
  for (int r = 0; r < b.B; ++r)
    for (int t = 0; t < b.T; ++t) {
      const int64_t i = int64_t(r) * b.T + t;
      const bool restart = t == 0 || (b.segments && b.segments[i] != b.segments[i - 1]);
      host_positions_[size_t(i)] =
          restart ? (t == 0 ? first_position : 0) : host_positions_[size_t(i - 1)] + 1;
    }
  mb_.B = b.B;
  mb_.T = b.T;
  if (upload_) upload_->begin();
  auto stage = [&](Buffer& dst, const int32_t* src, int64_t count) {
    put(upload_.get(), dst, src, DType::i32, count);
  };
  stage(mb_.tokens, b.tokens, N);
  stage(mb_.positions, host_positions_.data(), N);
  mb_.has_targets = b.targets != nullptr;
  mb_.has_segments = b.segments != nullptr;
  mb_.has_lengths = b.lengths != nullptr;
  if (mb_.has_targets) stage(mb_.targets, b.targets, N);
  if (mb_.has_segments) stage(mb_.segments, b.segments, N);
  mb_.runs_count = 0;
  if (mb_.has_segments &&
      exec_.device == Device::cuda) {  // only cuDNN's ragged attention reads them
    const std::vector<int32_t> runs = segment_runs(b.segments, b.B, b.T);
    mb_.runs_count = runs.empty() ? 0 : int64_t(runs.size()) - 1;
    if (mb_.runs_count > 0) stage(mb_.runs, runs.data(), int64_t(runs.size()));
  }
  if (mb_.has_lengths) stage(mb_.lengths, b.lengths, b.B);
  if (upload_) upload_->end(ctx_.stream);
  return counted;
}

void Transformer::put(PinnedUpload* up, Buffer& dst, const void* src, DType dtype, int64_t count) {
  if (up)
    up->copy(dst.data(), src, size_t(count) * dtype_size(dtype), ctx_.stream);
  else
    copy(ctx_, dst.view(dtype, count), make_tensor(src, dtype, {count}));
}

int64_t Transformer::forward(const BatchView& batch) {
  TRAINER_ASSERT(config_.pipeline.whole(), "a whole-model forward on a pipeline stage");
  const int64_t counted = stage_batch(batch, 0);
  graphed_ = graphs_allowed();
  forward_blocks_and_head(nullptr);
  return counted;
}

bool Transformer::graphs_allowed() const {
  if (!exec_.cuda_graphs || mb_.has_segments || profile::g_enabled) return false;
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
  stage_batch({1, count, tokens, nullptr, nullptr, nullptr}, cache.length());
  graphed_ = false;
  forward_blocks_and_head(&cache);
  cache.length_ += count;
}

void Transformer::forward_blocks_and_head(KvCache* cache) {
  embedding_forward_pass();
  blocks_forward(0, config_.n_layer, cache);
  head_forward_pass();
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
                      param(wf, F, Role::final_norm_w));
    else
      layernorm_forward(ctx_, act(plan_.lnf), act(plan_.lnf_mean), act(plan_.lnf_rstd),
                        act(plan_.output(last)), param(wf, F, Role::final_norm_w),
                        param(wf, F, Role::final_norm_b));
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

void Transformer::backward(float loss_scale) {
  TRAINER_ASSERT(mb_.has_targets && exec_.training,
                 "backward needs a training model and a forward pass with targets");
  set_loss_scale(loss_scale);
  graphed_ = graphs_allowed();
  head_backward_pass();
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    backward_block(l);
    unit_ready(layout_.block_unit(l));
  }
  embedding_backward_pass();
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
  segment(true, E, [&] {
    // Every token's gradient reaches every vocabulary slice (gathered, sliced).
    const Tensor d_res = act(plan_.d_res);
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

// Note [Pipeline stages]
// Under pipeline parallelism each process holds some of the layers (ModelConfig::pipeline): its
// chunks, one per virtual stage it runs, the embedding on the first stage and the final norm,
// head and loss on the last (which holds the token embedding too when the head reads it, its
// gradient summed with the first stage's by the caller). Its layout holds those units in the
// whole model's order, each a range of the whole model's buffer (Unit::whole_begin), so
// checkpoints are written in the whole model's coordinates and load at any layout. Activations
// and batch inputs are planned once per slot: a slot is one micro-batch in flight between its
// forward and its backward. The residual stream crosses between stages at chunk boundaries;
// every stage stages the same batch itself (tokens for the embedding, targets for the loss,
// segment ids and lengths for attention's masks), so only activations and their gradients
// travel, and their shapes are known to both sides.
void Transformer::forward_chunk(int chunk) {
  const auto [begin, end] = chunks_[size_t(chunk)];
  graphed_ = false;
  if (chunk == 0 && config_.pipeline.first) embedding_forward_pass();
  blocks_forward(begin, end, nullptr);
  if (chunk + 1 == int(chunks_.size()) && config_.holds_head()) head_forward_pass();
}

void Transformer::backward_chunk(int chunk, float loss_scale) {
  TRAINER_ASSERT(exec_.training, "backward of a forward-only model");
  const auto [begin, end] = chunks_[size_t(chunk)];
  graphed_ = false;
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

void Transformer::zero_grads() {
  PROFILE_SCOPE("zero_grads", "other");
  if (exec_.own_params) fill_zero(ctx_, grads());
}

void Transformer::reset_loss() {
  fill_zero(ctx_, scalars_.view(DType::f64, 1));
}

StepScalars Transformer::read_step_scalars(const ConstTensor& grads) {
  const Tensor scalars = scalars_.view(DType::f64, 2);
  if (!grads.empty())
    sum_squares(ctx_, scalars.flat(1, 1), grads);
  else
    fill_zero(ctx_, scalars.flat(1, 1));
  double host[2];
  copy(ctx_, make_tensor(host, DType::f64, {2}), scalars);
  return {host[0], host[1]};
}

}  // namespace trainer::nn
