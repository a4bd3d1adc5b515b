#include "nn/transformer.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "nn/kv_cache.h"
#include "nn/lora.h"
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
  c.deterministic = e.attention_backward == AttentionBackward::deterministic;
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
      spec_(arch_spec(config)),
      layout_(config),
      plan_(config, (exec.validate(config), exec)),  // validated before anything is sized
      ctx_(context_for(exec)),
      graphs_(size_t(16) * size_t(config.n_layer + 2)) {  // 8 shapes, 2 passes, every unit
  const Memory mem = planned_memory(config, exec);
  const Device dev = exec.device;
  workspace_ = Workspace(size_t(mem.workspace), dev);
  ctx_.workspace = &workspace_;
  params_ = Buffer(size_t(mem.params), dev, MemoryUse::weights);
  working_ = Buffer(size_t(mem.working), dev, MemoryUse::weights);
  grads_ = Buffer(size_t(mem.grads), dev, MemoryUse::gradients);
  const size_t N = size_t(plan_.capacity());
  TRAINER_ASSERT(exec.activation_slots >= 1, "{} activation slots", exec.activation_slots);
  slots_.resize(size_t(exec.activation_slots));
  for (MicroBatchState& s : slots_) {
    s.acts = Buffer(size_t(plan_.slot_bytes()), dev, MemoryUse::activations);
    for (Buffer* b : {&s.tokens, &s.targets, &s.positions, &s.segments, &s.lengths})
      *b = Buffer(N * sizeof(int32_t), dev, MemoryUse::activations);
    s.runs = Buffer((N + 1) * sizeof(int32_t), dev, MemoryUse::activations);
  }
  std::swap(mb_, slots_[0]);
  scratch_ = Buffer(size_t(plan_.bytes() - plan_.slot_bytes()), dev, MemoryUse::activations);
  // The loss scale and the step's scalars count with the batch's inputs (Memory::inputs).
  loss_scale_ = Buffer(sizeof(float), dev, MemoryUse::activations);
  scalars_ = Buffer(2 * sizeof(double), dev, MemoryUse::activations);
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

// Note [Pipeline stages]
// Under pipeline parallelism each process holds some of the layers (ModelConfig::pipeline): its
// chunks, one per virtual stage it runs, the embedding on the first stage and the final norm,
// head and loss on the last (which holds the token embedding too when the head reads it, its
// gradient summed with the first stage's by the caller). Its layout holds those units in the
// whole model's order, each a range of the whole model's buffer (Unit::whole_begin), so
// checkpoints are written in the whole model's coordinates and load at any layout. Activations
// and batch inputs are planned once per slot: a slot is one micro-batch in flight between its
// forward and its backward. The residual stream crosses between stages at chunk boundaries;
// every stage loads the same batch itself (tokens for the embedding, targets for the loss,
// segment ids and lengths for attention's masks), so only activations and their gradients
// travel, and their shapes are known to both sides.
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

int64_t Transformer::rows(const ActSlot& slot, int B, int T) const {
  return int64_t(B) * T / (slot.sliced ? config_.sequence_slices() : 1);
}

Tensor Transformer::act(const ActSlot& slot) const {
  TRAINER_ASSERT(slot.offset >= 0, "an activation without a slot");
  const int64_t N = rows(slot, mb_.B, mb_.T);
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
  if (use == ParamUse::forward) {  // the embedding, the blocks, the head
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
  t.products = &spec_.block_matmuls;
  if (!spec_.adapters.empty()) t.adapters = &spec_.adapters;
  t.positions = mb_.positions.view(DType::i32, int64_t(mb_.B) * mb_.T);
  const int u = layout_.block_unit(l);
  const Tensor w = unit_weights(u, use);
  const Tensor g = use == ParamUse::backward ? unit_grads(u) : Tensor{};
  for (size_t r = 0; r < size_t(Role::kCount); ++r)
    if (layout_.has(u, Role(r))) {
      t.w[r] = param(w, u, Role(r));
      if (!g.empty() && !skips_weight_grad(config_, Role(r))) t.g[r] = param(g, u, Role(r));
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
  if (mb_.dropout_key) {
    const DropoutRates& rates = config_.dropout;
    if (rates.attention > 0)
      t.mask.dropout = {rates.attention, dropout_site_key(*mb_.dropout_key, l, DropSite::attention),
                        config_.tensor.rank * config_.local_heads()};
    t.branch_drop = {stream_dropout(l, DropSite::attention_branch, rates.residual),
                     stream_dropout(l, DropSite::mlp_branch, rates.residual)};
    if (t.adapters && rates.adapter > 0)
      t.adapter_drop = {rates.adapter,
                        dropout_site_key(*mb_.dropout_key, l, DropSite::adapter_input)};
  }
  return t;
}

DropoutMask Transformer::stream_dropout(int layer, DropSite site, float p) const {
  if (!mb_.dropout_key || p <= 0) return {};
  // Under sequence parallelism this rank holds the tokens of its place in the group.
  const int64_t tokens = int64_t(mb_.B) * mb_.T / config_.sequence_slices();
  const int64_t first = config_.sequence_slices() > 1 ? config_.tensor.rank * tokens : 0;
  return {p, dropout_site_key(*mb_.dropout_key, layer, site), first * config_.n_embd};
}

int64_t Transformer::copy_batch(const BatchView& b, int first_position) {
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
  auto copy = [&](Buffer& dst, const int32_t* src, int64_t count) {
    put(upload_.get(), dst, src, DType::i32, count);
  };
  copy(mb_.tokens, b.tokens, N);
  copy(mb_.positions, host_positions_.data(), N);
  mb_.has_targets = b.targets != nullptr;
  mb_.has_segments = b.segments != nullptr;
  mb_.has_lengths = b.lengths != nullptr;
  mb_.dropout_key = config_.dropout.any() ? b.dropout_key : std::nullopt;
  if (mb_.has_targets) copy(mb_.targets, b.targets, N);
  if (mb_.has_segments) copy(mb_.segments, b.segments, N);
  mb_.runs_count = 0;
  if (mb_.has_segments &&
      exec_.device == Device::cuda) {  // only cuDNN's ragged attention reads them
    const std::vector<int32_t> runs = segment_runs(b.segments, b.B, b.T);
    mb_.runs_count = runs.empty() ? 0 : int64_t(runs.size()) - 1;
    if (mb_.runs_count > 0) copy(mb_.runs, runs.data(), int64_t(runs.size()));
  }
  if (mb_.has_lengths) copy(mb_.lengths, b.lengths, b.B);
  if (upload_) upload_->end(ctx_.stream);
  return counted;
}

void Transformer::put(PinnedUpload* up, Buffer& dst, const void* src, DType dtype, int64_t count) {
  if (up)
    up->copy(dst.data(), src, size_t(count) * dtype_size(dtype), ctx_.stream);
  else
    copy(ctx_, dst.view(dtype, count), make_tensor(src, dtype, {count}));
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
