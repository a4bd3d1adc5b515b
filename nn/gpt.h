// The GPT-2-style decoder: token + learned position embeddings, pre-LayerNorm blocks (causal
// multi-head attention, GELU MLP), a final LayerNorm and an LM head tied to the token
// embedding. Forward and backward are explicit calls over flat parameter and gradient
// buffers (see ParamLayout); nothing here knows about ranks or communication: layers above
// attach to the hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/activations.h"
#include "nn/model_config.h"
#include "nn/ops/attention.h"
#include "nn/ops/cross_entropy.h"
#include "nn/param_layout.h"
#include "runtime/buffer.h"

namespace trainer::nn {

// One batch as the model sees it (the data layer's Batch, by pointer). Rows are B x T.
struct BatchView {
  int B = 0, T = 0;
  const int32_t* tokens = nullptr;    // (B,T)
  const int32_t* targets = nullptr;   // (B,T), -1 = not counted; null = no loss (inference)
  const int32_t* segments = nullptr;  // (B,T) or null: packed documents; positions restart
  const int32_t* lengths = nullptr;   // (B) or null: real tokens per row, the rest is padding
};

class GPT {
 public:
  // Allocates parameters, gradients and activations for batches of up to max_rows *
  // max_seq_len tokens in rows of at most max_seq_len (bucketed batches may have more, shorter
  // rows). Parameters start at zero: call init_weights or load them.
  GPT(const ModelConfig& config, int max_rows, int max_seq_len);

  // GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2L), zero biases,
  // unit norms. Each tensor's values depend only on (seed, its name).
  void init_weights(uint64_t seed);

  // Runs the model on a batch. With targets, returns the summed loss and count of counted
  // targets and keeps what backward needs; without, leaves logits() valid.
  LossSum forward(const BatchView& batch);

  // Gradients of loss_scale * (the last forward's summed loss), added to grads(); call
  // zero_grads() first on a step's first micro-batch. loss_scale is 1 / (global token count).
  void backward(float loss_scale);
  void zero_grads();

  // Called during backward each time a range [begin, end) of grads() is final for this
  // micro-batch, from the end of the flat buffer towards its start (ln_f, block L-1, ...,
  // block 0, then the embeddings).
  std::function<void(int64_t begin, int64_t end)> on_grads_ready;

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const ActivationLayout& activation_layout() const { return acts_layout_; }
  float* params() { return params_.as<float>(); }
  const float* params() const { return params_.as<float>(); }
  float* grads() { return grads_.as<float>(); }
  const float* grads() const { return grads_.as<float>(); }
  // (B*T, V) logits of the last forward without targets.
  const float* logits() const { return act(acts_layout_.logits); }

 private:
  float* act(int64_t offset) const { return acts_.as<float>() + offset; }
  void forward_block(int l, int64_t N);
  void backward_block(int l, int64_t N);
  void prepare_inputs(const BatchView& batch);
  AttentionMask mask() const;

  ModelConfig config_;
  ParamLayout layout_;
  ActivationLayout acts_layout_;
  Buffer params_, grads_, acts_;
  // Copies of the last forward's inputs (backward needs them after the caller moved on).
  int B_ = 0, T_ = 0;
  std::vector<int32_t> tokens_, targets_, positions_, segments_, lengths_;
  bool has_targets_ = false, segments_active_ = false, lengths_active_ = false;
};

}  // namespace trainer::nn
