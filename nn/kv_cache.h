// Incremental decoding with a key/value cache: each new token runs through the blocks once,
// attending to the cached keys and values of every earlier position, so generating n tokens
// costs O(n) block evaluations instead of O(n^2). Uses the model's parameters read-only.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/gpt.h"

namespace trainer::nn {

class KvCacheDecoder {
 public:
  // A cache for one sequence of up to model.config().max_seq_len positions.
  explicit KvCacheDecoder(const GPT& model);

  // Appends `token` at the next position and returns the (V) logits for the position after it.
  // Throws when the sequence is full.
  const float* push(int32_t token);
  int length() const { return length_; }
  void reset() { length_ = 0; }

 private:
  const GPT& model_;
  int length_ = 0;
  std::vector<float> k_, v_;  // (L, P, C) cached keys and values
  std::vector<float> x_, ln_, qkv_, att_, tmp_, fc_, fc_gelu_, logits_, scores_;
  float mean_ = 0, rstd_ = 0;
};

}  // namespace trainer::nn
