// Rotary position embeddings (RoFormer; Llama's and GPT-NeoX's rotate-half pairing): within each
// head of size hs, the first rd channels (rd = hs for Llama; a fraction of hs for GPT-NeoX,
// "partial rotary") rotate in pairs (i, i + rd/2) by the angle pos * inv_freq(i); the other
// hs - rd channels pass unchanged. Letters: N tokens, H heads. Applied in place to the queries
// and keys (strided views of the packed qkv activation); positions are the tokens' positions
// within their documents.
#pragma once

#include <math.h>

#include <cstdint>

#include "runtime/context.h"
#include "runtime/host_device.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// How the rotary frequencies are scaled for contexts longer than a model was trained at, as
// Hugging Face's rope_scaling types compute them: none; linear (every frequency divided by
// factor: positions interpolated); llama3 (Llama 3.1's: wavelengths shorter than
// original_context / high_freq_factor kept, longer than original_context / low_freq_factor
// divided by factor, those between interpolated smoothly).
enum class RopeScaling : uint8_t { none, linear, llama3 };

// The rotary embeddings' parameters (ModelConfig::rope() derives them from the model's keys).
struct Rope {
  float theta = 10000.0f;  // the base: inv_freq(i) = theta^(-2i/rd) before scaling
  RopeScaling scaling = RopeScaling::none;
  float factor = 1.0f;  // linear, llama3
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f, original_context = 8192.0f;  // llama3
};

// The inverse frequency of pair i of rd rotary channels, in fp32 in the order Hugging Face's
// rope initialisation functions compute it (the one formula of both backends).
TRAINER_HOST_DEVICE inline float rope_inv_freq(const Rope& r, int64_t i, int64_t rd) {
  const float f = 1.0f / powf(r.theta, float(2 * i) / float(rd));
  if (r.scaling == RopeScaling::linear) return f / r.factor;
  if (r.scaling != RopeScaling::llama3) return f;
  const float wavelen = 2.0f * 3.14159265358979323846f / f;
  if (wavelen < r.original_context / r.high_freq_factor) return f;
  if (wavelen > r.original_context / r.low_freq_factor) return f / r.factor;
  const float smooth =
      (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1.0f - smooth) * f / r.factor + smooth * f;
}

// x(N, H*hs) (fp32 or bf16, strided rows allowed) rotated in place by positions(N) (int32);
// rotary_dims (rd) is even, 2 <= rd <= hs, rd <= 1024.
void rope_forward(const Context& ctx, const Tensor& x, const ConstTensor& positions, int head_size,
                  int rotary_dims, const Rope& rope);
// dx(N, H*hs) in place: the gradient at the rotation's output becomes the gradient at its
// input (the inverse rotation).
void rope_backward(const Context& ctx, const Tensor& dx, const ConstTensor& positions,
                   int head_size, int rotary_dims, const Rope& rope);

}  // namespace trainer::nn
