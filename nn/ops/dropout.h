// Dropout with masks that are a pure function of (key, element), drawn by Philox on either
// backend, so that a mask is never stored: forward, a recomputation under activation
// checkpointing, backward and another tensor-parallel rank all draw it again, the same.
//
// Note [Dropout masks]
// Element e of a masked tensor is kept when dropout_bits(key, first + e) >= dropout_threshold(p),
// with probability 1 - t / 2^32 where t = dropout_threshold(p) = round(p 2^32) (within 2^-32 of
// 1 - p), and a kept element is scaled by 1 / (1 - p), so that the mean is preserved. `first` is
// the counter of the tensor's element 0 in the whole of what the key covers: a slice of tokens
// (sequence parallelism) passes its first token times the row width, and draws the very bits the
// whole tensor would. The model derives one key per micro-batch, layer and site
// (nn/dropout.h); attention derives one per head from its site's key (attention_dropout_key).
// A column slice of a wider tensor (a LoRA adapter's input under tensor parallelism's
// row-parallel products) passes the whole tensor's row width as `row_stride`, and its row i
// draws counters first + i * row_stride onwards: the whole tensor's bits of its columns.
#pragma once

#include <cstdint>

#include "runtime/context.h"
#include "runtime/host_device.h"
#include "runtime/philox.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// Which elements a dropout keeps: probability p of dropping (0: none), under `key`, the tensor's
// element 0 being counter `first`, and row i of a matrix starting at counter
// first + i * row_stride (0: the rows are adjacent, a contiguous run of counters).
struct DropoutMask {
  float p = 0;
  uint64_t key = 0;
  int64_t first = 0;
  int64_t row_stride = 0;
  TRAINER_HOST_DEVICE bool on() const { return p > 0; }
};

// 32 random bits of counter e under `key`: lane e % 4 of Philox at counter e / 4.
TRAINER_HOST_DEVICE inline uint32_t dropout_bits(uint64_t key, uint64_t e) {
  const uint64_t block = e >> 2;
  return philox({{uint32_t(block), uint32_t(block >> 32), 0, 0}}, key).v[e & 3];
}

// The bits at or above which an element is kept (p in [0, 1)).
TRAINER_HOST_DEVICE inline uint32_t dropout_threshold(float p) {
  const double t = double(p) * 4294967296.0 + 0.5;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : uint32_t(t);
}

// A kept element's factor.
TRAINER_HOST_DEVICE inline float dropout_scale(float p) {
  return 1.0f / (1.0f - p);
}

// The key of head `head` (counted over the whole model's heads) of an attention site's key.
TRAINER_HOST_DEVICE inline uint64_t attention_dropout_key(uint64_t key, int64_t head) {
  return philox_subkey(key, uint32_t(head), 0xA77E4u, 0, 0);
}

// out = inp with the mask applied (zero where dropped, scaled by 1 / (1 - p) where kept), or
// out += that when `accumulate` (out then not inp), over contiguous tensors of the same element
// count, each fp32 or bf16 (out may be inp, in place); with mask.row_stride, matrices of the
// same shape whose rows are at most that wide. The same op is its own backward: the gradient
// through the mask is the mask applied to it.
void dropout(const Context& ctx, const Tensor& out, const ConstTensor& inp, const DropoutMask& mask,
             bool accumulate = false);

}  // namespace trainer::nn
