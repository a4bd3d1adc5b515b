// The workspace cuDNN's attention takes from the model's, planned before the first step (Note
// [cuDNN attention workspace]). Arithmetic only, built in every configuration, so that `trainer
// plan` and the tests see it without a GPU.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::nn {

// What a cuDNN plan may use beyond its graph's own needs (none, mostly, for the forward and the
// non-deterministic backward; cuDNN says no more).
constexpr int64_t kCudnnEngineAllowance = int64_t(16) << 20;
// The most the deterministic backward's dP tiles are planned for: past it (long sequences) the
// own kernel or the non-deterministic backward serve, and the run says which.
constexpr int64_t kCudnnDeterministicCap = int64_t(1) << 30;

// The most tensors of one graph with ragged offsets: q, k, v, o, the statistics, dq, dk and dv
// (the non-deterministic backward's dq accumulator shares dq's).
constexpr int kMaxRaggedTensors = 8;

// What a shape's plan is left to the device for: at least this much free memory stays free.
constexpr int64_t kCudnnReplanReserve = int64_t(1) << 30;

// When no cuDNN plan fits the `planned` engine workspace but one needs `least_need` bytes (the
// refusal's own figure, 0 when none was refused for its workspace): the workspace to plan that
// shape again with, least_need, where the device's `free_bytes` hold it with
// kCudnnReplanReserve to spare (the shape then keeps a workspace of its own, allocated once);
// else 0, and the own kernel serves the shape, counted as a fallback.
int64_t cudnn_replan_workspace(int64_t planned, int64_t least_need, int64_t free_bytes);

// The graph batch of R runs of a packed batch: a power of two from 8 (one plan per bucket).
int64_t cudnn_ragged_bucket(int64_t runs);

// Why cuDNN `version` (cudnnGetVersion's number, 91400 for 9.14.0) does not serve bf16
// training attention over rows of T tokens with n_head heads of head_size, packed (`segments`,
// ragged sequences) or padded (`lengths`) or neither; "" when it does, and a fallback from it
// is then a failure. Each reason is a limit of that version's engines or of how cuDNN's
// frontend composes them, by design: the own kernel serves those calls.
std::string cudnn_attention_ineligible(int64_t version, int64_t T, int64_t head_size, int n_head,
                                       bool segments, bool lengths);

struct CudnnAttentionWorkspace {
  int64_t scratch = 0;  // ours: statistics, row sums, lengths, ragged offsets, dQ accumulator
  int64_t engine = 0;   // the most a plan may use
  int64_t total() const { return scratch + engine; }
};

// For up to `rows` rows of T tokens and n_head query heads of head_size: the forward, or the
// backward, deterministic (dQ written by its own product; Hopper's engines keep the dP tiles,
// rows * n_head * T^2 * 2 bytes, T rounded up to 64) or not (dQ accumulated in fp32 in our
// scratch by atomic adds, whose order varies: up to 3 n_head * head_size floats a token, the
// row stride of a packed q, k, v gradient, which a packed batch's accumulator shares).
CudnnAttentionWorkspace cudnn_attention_workspace_plan(int64_t rows, int n_head, int64_t T,
                                                       int64_t head_size, bool backward,
                                                       bool deterministic);

}  // namespace trainer::nn
