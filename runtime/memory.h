// Moving and clearing tensor memory on any device: the only place the model's buffers cross
// between host and device.
#pragma once

#include <vector>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer {

// dst = src, element for element: same dtype and element count, both contiguous, on any pair
// of devices. A copy to the host is complete when this returns; a copy to the device is queued
// on ctx's stream, in order with its kernels (a pageable host source may be reused at once, a
// pinned one only once the stream has passed the copy).
void copy(const Context& ctx, const Tensor& dst, const Tensor& src);

// The elements of a contiguous fp32 or bf16 tensor, on the host as fp32 (a copy; for
// diagnostics and tests, not the step).
std::vector<float> read_as_f32(const Context& ctx, const Tensor& t);

// Every element of the contiguous tensor `t` set to zero.
void fill_zero(const Context& ctx, const Tensor& t);

// Waits until the work queued on ctx's device (its stream) is done: for timing. A no-op on the
// CPU, whose ops finish before they return.
void synchronize(const Context& ctx);

}  // namespace trainer
