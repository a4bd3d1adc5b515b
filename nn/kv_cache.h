// Incremental decoding with a key/value cache: each new token runs through the model's own
// block forward once (Transformer::forward_cached), attending to the cached keys and values of
// every earlier position, so generating n tokens costs O(n) block evaluations, not O(n^2).
#pragma once

#include <cstdint>
#include <vector>

#include "nn/transformer.h"
#include "runtime/buffer.h"

namespace trainer::nn {

// Keys and values of one sequence's positions, per block, in the model's compute dtype.
class KvCache {
 public:
  // Room for model.config().max_seq_len positions, on the model's device.
  explicit KvCache(const Transformer& model);
  int length() const { return length_; }
  int capacity() const { return P_; }
  void reset() { length_ = 0; }
  // Block l's keys and values: (P, Ckv), Ckv = the key/value heads' channels.
  Tensor keys(int layer) const;
  Tensor values(int layer) const;

 private:
  friend class Transformer;  // appends positions in forward_cached
  Buffer k_, v_;
  DType dtype_;
  int layers_;
  int64_t P_, C_;
  int length_ = 0;
};

// Feeds tokens one at a time and hands back the next position's logits in host fp32.
class KvCacheDecoder {
 public:
  // `model` must be sized for one row of one token (max_rows = max_seq_len = 1).
  explicit KvCacheDecoder(Transformer& model);

  // Appends `token` at the next position and returns the (V) logits for the position after it.
  // Throws when the sequence is full or the token is out of range.
  const float* push(int32_t token);
  int length() const { return cache_.length(); }
  void reset() { cache_.reset(); }

 private:
  Transformer& model_;
  KvCache cache_;
  Buffer logits_f32_;          // (V) fp32 on the model's device
  std::vector<float> logits_;  // (V) on the host
};

}  // namespace trainer::nn
