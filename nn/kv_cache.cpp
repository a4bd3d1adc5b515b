#include "nn/kv_cache.h"

#include "nn/ops/cast.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::nn {

KvCache::KvCache(const Transformer& model)
    : dtype_(model.exec().compute),
      layers_(model.config().n_layer),
      P_(model.config().max_seq_len),
      C_(model.config().kv_channels()) {  // grouped-query: the key/value heads once
  const size_t bytes = size_t(model.config().n_layer * P_ * C_) * dtype_size(dtype_);
  k_ = Buffer(bytes, model.exec().device, MemoryUse::activations);
  v_ = Buffer(bytes, model.exec().device, MemoryUse::activations);
}

namespace {
// Block l's (P, C) slice of a (L, P, C) buffer.
Tensor layer_slice(const Buffer& b, DType t, int layer, int64_t P, int64_t C) {
  return make_tensor(static_cast<char*>(b.data()) + size_t(layer * P * C) * dtype_size(t), t,
                     {P, C}, b.device());
}
}  // namespace

Tensor KvCache::keys(int layer) const {
  TRAINER_ASSERT(layer >= 0 && layer < layers_, "KV cache layer {} of {}", layer, layers_);
  return layer_slice(k_, dtype_, layer, P_, C_);
}

Tensor KvCache::values(int layer) const {
  TRAINER_ASSERT(layer >= 0 && layer < layers_, "KV cache layer {} of {}", layer, layers_);
  return layer_slice(v_, dtype_, layer, P_, C_);
}

KvCacheDecoder::KvCacheDecoder(Transformer& model)
    : model_(model),
      cache_(model),
      logits_f32_(size_t(model.config().vocab_size) * sizeof(float), model.exec().device),
      logits_(size_t(model.config().vocab_size)) {}

const float* KvCacheDecoder::push(int32_t token) {
  model_.forward_cached(&token, 1, cache_);
  const int64_t V = model_.config().vocab_size;
  const Tensor f32 = logits_f32_.view(DType::f32, V);
  cast(model_.context(), f32, model_.logits().reshape({V}));
  copy(model_.context(), make_tensor(logits_.data(), DType::f32, {V}), f32);
  return logits_.data();
}

}  // namespace trainer::nn
