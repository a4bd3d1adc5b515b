// Moving and clearing tensor memory on any device: the only place the model's buffers cross
// between host and device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer {

// dst = src, element for element: same dtype and element count, both contiguous, on any pair
// of devices. A copy to the host is complete when this returns; a copy to the device is queued
// on ctx's stream, in order with its kernels (a pageable host source may be reused at once, a
// pinned one only once the stream has passed the copy).
void copy(const Context& ctx, const Tensor& dst, const ConstTensor& src);

// The elements of a contiguous fp32 or bf16 tensor, on the host as fp32 (a copy; for
// diagnostics and tests, not the step).
std::vector<float> read_as_f32(const Context& ctx, const ConstTensor& t);

// Every element of the contiguous tensor `t` set to zero.
void fill_zero(const Context& ctx, const Tensor& t);

// Whole-model data (initialising, loading, saving, checking weights) crosses host memory a
// piece at a time, so that no step of it holds a copy of the largest tensor (an embedding of
// V x C): fn(begin, end) for consecutive pieces of [0, n), each of at most kHostPiece elements.
inline constexpr int64_t kHostPiece = int64_t(1) << 20;
template <class Fn>
void for_each_piece(int64_t n, Fn&& fn) {
  for (int64_t b = 0; b < n; b += kHostPiece) fn(b, std::min(n, b + kHostPiece));
}

// Waits until the work queued on ctx's device (its stream) is done: for timing. A no-op on the
// CPU, whose ops finish before they return.
void synchronize(const Context& ctx);

}  // namespace trainer
