// The CPU's loop over a span of a dropout mask (Note [Dropout masks]), shared by the dropout op
// and attention's probabilities: one Philox block per four elements.
#pragma once

#include <cstdint>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/dropout.h"

namespace trainer::nn::cpu {

// out[j] = in[j] times element (first + j)'s factor under `mask` (0 dropped, 1 / (1 - p) kept),
// or out[j] += that when Accumulate, for j in [0, n); out may be in. A product, so that a NaN or
// an infinity stays one where it is dropped (the non-finite guard must still see it).
template <bool Accumulate = false, typename In, typename Out>
inline void dropout_span(Out* out, const In* in, int64_t n, const DropoutMask& mask,
                         int64_t first) {
  const uint32_t threshold = dropout_threshold(mask.p);
  const float scale = dropout_scale(mask.p);
  for (int64_t j = 0; j < n;) {
    const uint64_t e = uint64_t(first + j), block = e >> 2;
    const Philox4 r = philox({{uint32_t(block), uint32_t(block >> 32), 0, 0}}, mask.key);
    for (unsigned lane = unsigned(e & 3); lane < 4 && j < n; ++lane, ++j) {
      const float v = load(in[j]) * (r.v[lane] >= threshold ? scale : 0.0f);
      if constexpr (Accumulate)
        store(out[j], load(out[j]) + v);
      else
        store(out[j], v);
    }
  }
}

}  // namespace trainer::nn::cpu
