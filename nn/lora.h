// LoRA: low-rank adapters on a frozen model's block products, as a specification (the
// adapters' parameters and scratch added to an architecture's), as a block's forward and
// backward (called by block_access::product_forward and product_backward for every product),
// and merged back into the base weights for export.
//
// Note [LoRA]
// An adapted product computes y = x W^T + s (x A^T) B^T, with A (r, in), B (out, r) and
// s = alpha / r (Hu et al.; PEFT's names and initialisation: A Kaiming-uniform, B zero, so a
// fresh adapter changes nothing). The adapters are parameters of their block's unit, after
// the base's, so every layout, shard, checkpoint and resume treats them as any parameter;
// the training loop freezes everything else (app/: no optimizer state, no communication, out
// of the gradient norm). On a stacked product (Llama's q/k/v, gate/up) an adapter adds to its
// base weight's columns of the product's output. Backward recomputes h = x A^T (one (N, r)
// product) rather than keep it, in the block's work activation lora_h with dh beside it:
//   dB += s dy^T h,  dh = s dy B,  dA += dh^T x,  dx += dh A.
// Tensor parallelism cuts an adapter like its base and needs no collective of its own: on a
// column-parallel product A is replicated and B cut like the base's rows, so each rank's dA is
// partial (its outputs' share, summed with the unit's backward: Split::partial_grad); on a
// row-parallel one A is cut like the base's columns and B replicated, so h, and with it B's
// gradient, is partial, and s h B^T rides in the partial output the product's sum adds up.
//
// With train.lora.dropout p (PEFT's lora_dropout), in training each adapter reads its input
// through a mask of its own, y = x W^T + s (drop(x) A^T) B^T, the base product reading x as it
// is. drop(x) goes into the block's work activation lora_x and is drawn again in backward rather
// than kept (Note [Dropout masks]): dA += dh^T drop(x), dx += drop'(dh A) (the same mask). A
// row-parallel product's input is this rank's columns of the whole input, and its mask counts
// the whole input's (DropoutMask::row_stride), so every layout draws one process's masks.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "nn/arch.h"
#include "nn/block.h"
#include "nn/model_config.h"
#include "nn/param_layout.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// Throws a UsageError naming train.lora's key when `m.lora` does not fit m's architecture
// (one without adapters, an unknown target, a rank past the products' sizes).
void validate_lora(const ModelConfig& m);

// Whether a parameter of role `r` is frozen by m's LoRA: every one but the adapters.
inline bool frozen_by_lora(const ModelConfig& m, Role r) {
  return m.lora.on() && !is_adapter(r);
}

// Whether backward leaves parameter `r`'s gradient out under m's LoRA: every product's weight
// and bias and the embedding are frozen, so their weight gradients are not computed (the
// norms' still are, by their ops, and frozen by the training loop like the rest).
bool skips_weight_grad(const ModelConfig& m, Role r);

// Adds m.lora's adapters to `spec` (whole shapes, before slice_spec): their parameters at the
// end of the block, named as PEFT names them without its "base_model.model." prefix, the
// scratch lora_h, and spec.adapters.
void add_adapters(ArchSpec& spec, const ModelConfig& m);

// The adapters of the product whose weight is `product` added to its output y (N, out), from
// the input x (N, in) it read: y += s (x A^T) B^T, on y's columns of each adapter's base.
void adapters_forward(const Context& ctx, const BlockTensors& t, Role product, const Tensor& y,
                      const ConstTensor& x);
// Adapter `ad`'s dropout mask over its product's input x (N, in) in block t, or none (not
// training with train.lora.dropout): a key of its own under the layer's site key, and the whole
// input's counters, a row-parallel product's slice of columns among them (Note [LoRA]).
DropoutMask adapter_dropout_mask(const BlockTensors& t, const Adapter& ad, const ConstTensor& x);
// Their backward, after the product's own: the factors' gradients added, and dx (N, in) added
// to, from the output's gradient dy (N, out) and the input x.
void adapters_backward(const Context& ctx, const BlockTensors& t, Role product, const Tensor& dx,
                       const ConstTensor& dy, const ConstTensor& x);

// Folds the adapters of `flat` (host fp32, laid out by the whole model's `layout`, LoRA on)
// into `base` (laid out by the base's layout): each base parameter copied, each adapted
// weight's elements W + s (B A) computed in double (the sum over the rank in order) and
// rounded to fp32 once.
void merge_adapters(const ParamLayout& layout, const float* flat, const ParamLayout& base_layout,
                    float* base);

// PEFT's name of the module an adapter adapts (its base weight's leaf: "q_proj" for Llama's q).
std::string peft_module(const ModelConfig& m, const Adapter& ad);
// The adapters a PEFT adapter_config.json (`file`, parsed as `config`) describes on model m:
// a LoRA of rank r, lora_alpha and target_modules (a list of m's modules, or "all-linear").
// Throws a UsageError naming the file and field for what the trainer does not compute (another
// peft_type, biases, DoRA, rsLoRA, per-layer ranks, fan_in_fan_out, modules_to_save, layers
// left out) or that m lacks.
LoraConfig lora_from_peft(const nlohmann::json& config, const ModelConfig& m,
                          const std::string& file);

// The adapters' input dropout a PEFT adapter_config.json (`file`, parsed as `config`) states:
// its lora_dropout (0 where absent); a UsageError naming the file unless in [0, 1).
float lora_dropout_from_peft(const nlohmann::json& config, const std::string& file);

// PEFT's name of adapter parameter `name` ("base_model.model." before it) and the inverse
// (throws a UsageError naming `name` when it is not one).
std::string peft_name(const std::string& name);
std::string from_peft_name(const std::string& peft);

}  // namespace trainer::nn
