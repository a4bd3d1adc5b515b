// The shape of a GPT model: everything needed to size its parameters and activations.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::nn {

struct ModelConfig {
  int vocab_size = 8192;  // V: embedding rows (pad to a multiple of 64 for speed)
  int max_seq_len = 256;  // learned positions available
  int n_layer = 6;        // L
  int n_head = 6;         // H
  int n_embd = 384;       // C; head size C / H

  int head_size() const { return n_embd / n_head; }
  // Throws trainer::Error naming the field when the shape is inconsistent.
  void validate() const;
  // Parameters taking part in a matmul (every one except biases, norms and positions; the tied
  // head counts once): N in the 6N FLOPs-per-token rule.
  int64_t matmul_params() const;
  // Model FLOPs per token for training: 6N + 12 L C T (PaLM appendix B).
  double flops_per_token(int seq_len) const;
};

}  // namespace trainer::nn
