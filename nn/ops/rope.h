// Rotary position embeddings (RoFormer; Llama's and GPT-NeoX's rotate-half pairing): within each
// head of size hs, the first rd channels (rd = hs for Llama; a fraction of hs for GPT-NeoX,
// "partial rotary") rotate in pairs (i, i + rd/2) by the angle pos * inv_freq(i); the other
// hs - rd channels pass unchanged. Letters: N tokens, H heads. Applied in place to the queries
// and keys (strided views of the packed qkv activation); positions are the tokens' positions
// within their documents.
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "runtime/context.h"
#include "runtime/host_device.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// How the rotary frequencies are scaled for contexts longer than a model was trained at, as
// Hugging Face's rope_scaling types compute them: none; linear (every frequency divided by
// factor: positions interpolated); llama3 (Llama 3.1's: wavelengths shorter than
// original_context / high_freq_factor kept, longer than original_context / low_freq_factor
// divided by factor, those between interpolated smoothly); yarn (YaRN, Peng et al. 2023, as
// Qwen's long-context configs use it: pairs up to ramp_low kept, from ramp_low + ramp_span on
// divided by factor, a linear ramp over the pair index between, and the rotated channels
// multiplied by attention_factor: with every channel rotated, each attention score by its
// square).
enum class RopeScaling : uint8_t { none, linear, llama3, yarn };

// The rotary embeddings' parameters (ModelConfig::rope() derives them from the model's keys).
struct Rope {
  float theta = 10000.0f;  // the base: inv_freq(i) = theta^(-2i/rd) before scaling
  RopeScaling scaling = RopeScaling::none;
  float factor = 1.0f;  // linear, llama3, yarn
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f, original_context = 8192.0f;  // llama3
  float ramp_low = 0.0f, ramp_span = 1.0f;  // yarn (yarn_ramp)
  float attention_factor = 1.0f;            // what the rotated channels are multiplied by
};

// transformers' get_mscale: 0.1 mscale ln(factor) + 1, or 1 for a factor of at most 1. YaRN's
// attention factor is yarn_mscale(factor), or DeepSeek's yarn_mscale(factor, mscale) over
// yarn_mscale(factor, mscale_all_dim).
inline double yarn_mscale(double factor, double mscale = 1) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// YaRN's ramp for rd rotary channels, as Hugging Face computes it in double: the pair index at
// which a frequency turns `turns` times over the original context is
// rd ln(original_context / (2 pi turns)) / (2 ln theta); the ramp runs from beta_fast's turns to
// beta_slow's (rounded outwards where `truncate`), kept within [0, rd - 1]. Returns {ramp_low,
// ramp_span} for Rope.
inline std::pair<float, float> yarn_ramp(double theta, double original_context, int rd,
                                         double beta_fast, double beta_slow, bool truncate) {
  auto pair_at = [&](double turns) {
    return rd * std::log(original_context / (turns * 2 * 3.14159265358979323846)) /
           (2 * std::log(theta));
  };
  double low = pair_at(beta_fast), high = pair_at(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = low > 0 ? low : 0;
  high = high < rd - 1 ? high : rd - 1;
  if (low == high) high += 0.001;  // as Hugging Face avoids a zero span
  return {float(low), float(high - low)};
}

// The inverse frequency of pair i of rd rotary channels, in fp32 in the order Hugging Face's
// rope initialisation functions compute it (the one formula of both backends; to rounding, as
// the compilers may fuse a product and a sum into one FMA).
TRAINER_HOST_DEVICE inline float rope_inv_freq(const Rope& r, int64_t i, int64_t rd) {
  const float period = powf(r.theta, float(2 * i) / float(rd));  // theta^(2i/rd)
  const float f = 1.0f / period;
  if (r.scaling == RopeScaling::yarn) {
    const float ramp = fminf(fmaxf((float(i) - r.ramp_low) / r.ramp_span, 0.0f), 1.0f);
    const float kept = 1.0f - ramp;
    return 1.0f / (r.factor * period) * (1.0f - kept) + f * kept;
  }
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
