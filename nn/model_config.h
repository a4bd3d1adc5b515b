// What a model is (ModelConfig: architecture and shape, which fix its parameters) and how it
// runs (ExecConfig: device, precision, activation checkpointing and the largest batch, which
// change memory and speed but not the parameters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "nn/ops/gelu.h"
#include "nn/ops/rope.h"
#include "runtime/context.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/enum_names.h"

namespace trainer::nn {

struct Architecture;  // nn/architecture.h

// Training FLOPs per token, 6N + 12 L C T (PaLM appendix B): a line in the sequence length T.
struct TokenFlops {
  double fixed = 0;         // 6N, N the matmul parameters (4N + 6 N_adapters under LoRA)
  double per_position = 0;  // 12 L C: attention's two products, forward and backward (C its
                            // width, attention_width())
  double at(int seq_len) const { return fixed + per_position * double(seq_len); }
};

// The slice of a model one process holds under tensor parallelism: its rank in a group of
// `degree` (Note [Tensor-parallel splits]).
struct TensorSlice {
  int degree = 1;
  int rank = 0;
  // Sequence parallelism (Note [Sequence parallelism] in nn/block.h): the residual stream, the
  // norms and their gradients hold 1/degree of each micro-batch's tokens.
  bool sequence = false;
};

// The layers one process holds under pipeline parallelism (Note [Pipeline stages] in
// nn/transformer.cpp): one run of consecutive layers per virtual stage it runs, and whether it
// holds the embedding (the first stage) and the final norm, head and loss (the last). No chunks:
// the whole model.
struct PipelineSlice {
  std::vector<std::pair<int, int>> chunks;  // [begin, end) of the model's layers, ascending
  bool first = true, last = true;
  bool whole() const { return chunks.empty(); }
};

// The double whose shortest decimal form is x's (1e-6f: 1e-6, not 9.99999997e-07), to write a
// float key where people and Hugging Face read it back as written.
double as_decimal(float x);

// model.gelu's names of the two GELU forms.
inline constexpr EnumNames<GeluForm, 2> kGeluNames{
    "model.gelu", {{{GeluForm::tanh, "tanh"}, {GeluForm::erf, "erf"}}}};

// model.rope_scaling's names, Hugging Face's rope_scaling types (Rope in nn/ops/rope.h).
inline constexpr EnumNames<RopeScaling, 4> kRopeScalingNames{"model.rope_scaling",
                                                             {{{RopeScaling::none, "none"},
                                                               {RopeScaling::linear, "linear"},
                                                               {RopeScaling::llama3, "llama3"},
                                                               {RopeScaling::yarn, "yarn"}}}};

// LoRA (Note [LoRA] in nn/lora.h): low-rank adapters of rank `rank` on the block products
// named in `targets` (names of the architecture's lora_targets), their sum scaled by
// alpha / rank; the base weights are frozen. rank 0: none.
struct LoraConfig {
  int rank = 0;
  float alpha = 16.0f;
  std::vector<std::string> targets;
  bool on() const { return rank > 0; }
  float scale() const { return alpha / float(rank); }
};

// Dropout probabilities by site (Note [Dropout] in nn/dropout.h), each in [0, 1). They change
// no parameter: what training computes, not what the model is. `adapter` is LoRA's, on its
// adapters' input (train.lora.dropout, PEFT's lora_dropout).
struct DropoutRates {
  float embedding = 0, attention = 0, residual = 0, adapter = 0;
  bool any() const { return embedding > 0 || attention > 0 || residual > 0 || adapter > 0; }
  bool operator==(const DropoutRates&) const = default;
};

struct ModelConfig {
  std::string arch = "gpt2";  // an architecture's name (nn/architecture.h lists them)
  int vocab_size = 8192;      // V: embedding rows (pad to a multiple of 64 for speed)
  int max_seq_len = 256;      // positions available
  int n_layer = 6;            // L
  int n_head = 6;             // H
  int n_embd = 384;           // C; head size C / H unless head_dim says otherwise
  // Keys only some architectures read (their records refuse the others' values):
  int n_kv_head = 0;          // key/value heads (0 = n_head), dividing n_head; 1 = multi-query
  int ffn_hidden = 0;         // SwiGLU hidden size before rounding (0 = 8C/3)
  int ffn_multiple_of = 256;  // the hidden size is rounded up to a multiple of this
  int head_dim = 0;           // channels of each head (0 = n_embd / n_head; Qwen3's differ)
  float rope_theta = 10000.0f;
  // The rotary frequencies' scaling (Rope in nn/ops/rope.h): its type, the factor, llama3's
  // low and high frequency factors, the original context (llama3, yarn), and yarn's turns at
  // the ends of its ramp, whether they round outwards, and its attention factor (0: Hugging
  // Face's default, 0.1 ln(factor) + 1).
  RopeScaling rope_scaling = RopeScaling::none;
  float rope_factor = 1.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int rope_original_context = 8192;
  float rope_beta_fast = 32.0f, rope_beta_slow = 1.0f, rope_attention_factor = 0.0f;
  bool rope_truncate = true;
  double rotary_pct = 1.0;         // the fraction of each head the rotary embeddings turn
  float norm_eps = 1e-5f;          // the epsilon of every LayerNorm or RMSNorm
  bool tie_embeddings = true;      // the head reads the token embedding
  GeluForm gelu = GeluForm::tanh;  // gpt2, neox: the MLP's GELU (Pythia's is erf)
  // The train.lora keys: adapters are parameters too (a key of train.*, since a published
  // model's folder never states them).
  LoraConfig lora;
  // The model.dropout keys, or a Hugging Face folder's rates: applied in training only, and
  // never part of comparing two models.
  DropoutRates dropout;
  // Not a key of model.*: the slice this process holds (dist.tensor_parallel and the rank's
  // place in the grid set it); the parameters and activations are the slice's.
  TensorSlice tensor;
  // Not a key of model.* either: the layers this process holds (dist.pipeline_parallel).
  PipelineSlice pipeline;

  // The record of `arch`; throws UsageError naming the architectures when there is none.
  const Architecture& architecture() const;
  int head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  // The attention's width: every query head's channels (n_embd unless head_dim says otherwise).
  int64_t attention_width() const { return int64_t(n_head) * head_size(); }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // What this slice holds: its heads, key/value heads, and vocabulary rows [vocab_begin(),
  // vocab_begin() + local_vocab()).
  int local_heads() const { return n_head / tensor.degree; }
  // Key/value heads are cut when the degree divides them, else every rank holds them all.
  bool kv_heads_whole() const { return kv_heads() % tensor.degree != 0; }
  int local_kv_heads() const { return kv_heads_whole() ? kv_heads() : kv_heads() / tensor.degree; }
  // The key/value head this slice's queries use when every rank holds them all.
  int used_kv_head() const { return tensor.rank * kv_heads() / tensor.degree; }
  int64_t local_vocab() const { return vocab_size / tensor.degree; }
  int64_t vocab_begin() const { return local_vocab() * tensor.rank; }
  // Into how many slices the residual stream's tokens are cut (1 without sequence parallelism).
  int sequence_slices() const { return tensor.sequence ? tensor.degree : 1; }
  // The model without its adapters: the base they train on.
  ModelConfig base() const {
    ModelConfig m = *this;
    m.lora = {};
    m.dropout.adapter = 0;
    return m;
  }
  // The whole model (tensor = {1, 0}, every layer).
  ModelConfig whole() const {
    ModelConfig m = *this;
    m.tensor = {};
    m.pipeline = {};
    return m;
  }
  // The layers this process holds, in order (every layer of a whole model), and the chunks
  // (one per virtual stage; one for a whole model).
  std::vector<int> held_layers() const;
  std::vector<std::pair<int, int>> held_chunks() const;
  // Whether this process holds the embedding (the first stage), the final unit and the loss
  // (the last stage), and, the head reading the token embedding (tied), the embedding too.
  bool holds_embedding_unit() const;
  bool holds_head() const { return pipeline.last; }
  // Key (and value) channels: kv_heads() * head_size().
  int64_t kv_channels() const { return int64_t(kv_heads()) * head_size(); }
  // The channels of each head the rotary embeddings turn: head_size() * rotary_pct, rounded
  // down as Hugging Face's GPT-NeoX does.
  int rotary_dims() const { return int(head_size() * rotary_pct); }
  // The rotary embeddings' parameters, from rope_theta, the rope_* keys and rotary_dims().
  Rope rope() const;
  // Throws UsageError naming the field when the shape is inconsistent: the keys every
  // architecture shares here, then the architecture's own checks, then whether the slice cuts
  // evenly (heads, key/value heads, vocabulary; the parameters' other dimensions in
  // slice_spec).
  void validate() const;
  // The rope_scaling keys: each type's own in range, the others at their defaults.
  void validate_rope_scaling() const;
  // Parameters taking part in a matmul (every block product's matrix, the head once whether
  // tied or not; not biases, norms or positions) of the whole model: N in the 6N
  // FLOPs-per-token rule.
  int64_t matmul_params() const;
  // Model FLOPs per token for training (PaLM appendix B), computed once per model.
  TokenFlops token_flops() const;
};

// Activation checkpointing: none keeps every activation backward needs; selective keeps the
// matmul outputs and recomputes the cheap parts (norms, GELU) in backward; full keeps only each
// block's input and reruns the block's forward inside its backward.
enum class Recompute : uint8_t { none, selective, full };

inline constexpr EnumNames<Recompute, 3> kRecomputeNames{
    "model.activation_checkpointing",
    {{{Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}}}};

// The floating-point dtypes a run computes in (model.precision) and sums gradients in
// (dist.grad_dtype).
inline constexpr EnumNames<DType, 2> kPrecisionNames{
    "model.precision", {{{DType::f32, "fp32"}, {DType::bf16, "bf16"}}}};
inline constexpr EnumNames<DType, 2> kGradDtypeNames{
    "dist.grad_dtype", {{{DType::f32, "fp32"}, {DType::bf16, "bf16"}}}};

// How cuDNN attention's backward writes dQ (train.attention_backward): by its own product, the
// same bits every run, or accumulated by atomic adds, faster in less memory but not
// reproducible (Context::deterministic).
enum class AttentionBackward : uint8_t { deterministic, fast };
inline constexpr EnumNames<AttentionBackward, 2> kAttentionBackwardNames{
    "train.attention_backward",
    {{{AttentionBackward::deterministic, "deterministic"}, {AttentionBackward::fast, "fast"}}}};

struct ExecConfig {
  Device device = Device::cpu;
  int device_index = 0;
  DType compute = DType::f32;  // activations and the working copy of the weights
  DType grad = DType::f32;     // the gradient buffer (bf16 only with bf16 compute)
  Recompute recompute = Recompute::none;
  std::vector<int> recompute_layers;  // blocks the policy applies to; empty = all
  // Micro-batches whose activations are held at once (a pipeline stage's in-flight ones): the
  // activations and the batch inputs are planned this many times.
  int activation_slots = 1;
  int max_rows = 1;          // the largest batch: up to max_rows * max_seq_len
  int max_seq_len = 1;       // tokens, in rows of at most max_seq_len
  bool training = true;      // false: forward only (no gradients, no backward memory)
  bool own_params = true;    // false: weights and gradients come from a UnitStore (sharding)
  void* stream = nullptr;    // CUDA: the stream the model's work is queued on (null: the legacy
                             // default stream); the caller owns it
  bool cuda_graphs = false;  // CUDA: replay training passes as graphs (Note [CUDA graphs])
  AttentionBackward attention_backward = AttentionBackward::deterministic;  // (Context)
  bool cudnn_attention = true;  // CUDA: cuDNN's fused attention where it applies (Context)
  // The CPU's bf16 path (Context::bf16_math); unset: detect_cpu_bf16_math's choice.
  std::optional<CpuBf16Math> cpu_bf16;

  // The policy for block l.
  Recompute policy(int layer) const;
  // Throws a UsageError naming the key when the dtypes, layers or lengths do not fit `model`.
  void validate(const ModelConfig& model) const;
};

}  // namespace trainer::nn
