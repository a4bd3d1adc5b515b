// Where the model applies dropout and how each mask's key is made.
//
// Note [Dropout]
// model.dropout and its per-site keys (ModelConfig::dropout) drop, in training only:
// - embedding: the first block's input, the token (and position) embeddings' sum;
// - attention: the attention probabilities, inside the attention op (AttentionDropout);
// - residual: each branch's output (the attention output projection's, the MLP's second
//   product's) before it joins the residual stream, as GPT-2's resid_pdrop and GPT-NeoX's
//   hidden_dropout do;
// - adapter input: what a LoRA adapter reads (train.lora.dropout: PEFT's lora_dropout), each
//   adapter its own mask, the product itself reading its input undropped (Note [LoRA]).
// Each mask is a pure function of (run.seed, optimizer step, the micro-batch's place in the
// global batch, layer, site) and of the element's place in the whole micro-batch (Note
// [Dropout masks] in nn/ops/dropout.h), so:
// - a block rerun under activation checkpointing draws its masks again, bit for bit, and a
//   resumed run draws the uninterrupted run's;
// - tensor-parallel ranks draw the same masks on replicated activations (the residual stream)
//   and, on their own heads or tokens (sequence parallelism), the whole model's masks of those;
// - pipeline stages draw the masks of the layers they hold, as one process would.
// Which micro-batch a mask belongs to is the training loop's to say (BatchView::dropout_key): eval,
// sample, task scoring and validation carry no key, and run without dropout. CUDA graphs are
// not captured for batches with dropout (the key changes every micro-batch).
#pragma once

#include <cstdint>

#include "runtime/philox.h"

namespace trainer::nn {

// The sites of Note [Dropout]; a block's residual dropout has one per branch.
enum class DropSite : uint32_t {
  embedding,
  attention,
  attention_branch,
  mlp_branch,
  adapter_input
};

// The key of micro-batch `micro` (its index in the global batch) of optimizer step `step`.
inline uint64_t dropout_batch_key(uint64_t seed, int64_t step, int64_t micro) {
  return philox_subkey(seed ^ 0xD50F0D50F0ull, uint32_t(step), uint32_t(uint64_t(step) >> 32),
                       uint32_t(micro), uint32_t(uint64_t(micro) >> 32));
}

// The key of one site of layer `layer` (0 for the embedding) under a micro-batch's key.
inline uint64_t dropout_site_key(uint64_t batch_key, int layer, DropSite site) {
  return philox_subkey(batch_key, uint32_t(layer), uint32_t(site), 0, 0);
}

}  // namespace trainer::nn
