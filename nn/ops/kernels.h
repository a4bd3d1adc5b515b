// One table of kernels per backend. The ops (nn/ops/<op>.h) are contracts; each backend has a
// kernel for every op, with the op's own signature, and one table that names them
// (<backend>/kernels.cpp). The ops reach a backend only through its table (dispatch.cpp); a
// backend this build lacks has no table. A new op is its contract, a line in TRAINER_OPS, a
// kernel per backend and its tests; a new backend is its kernels, its table and a Device.
#pragma once

#include "nn/ops/adamw.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/dropout.h"
#include "nn/ops/embedding.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/rope.h"
#include "nn/ops/sum_squares.h"
#include "nn/ops/swiglu.h"
#include "runtime/device.h"

namespace trainer::nn {

// Every op a backend implements; the table's fields, the backends' kernel declarations and
// their tables are made from this list.
// clang-format off
#define TRAINER_OPS(X)             \
  X(embedding_forward)             \
  X(embedding_backward)            \
  X(embedding_backward_workspace)  \
  X(layernorm_forward)             \
  X(layernorm_residual_forward)    \
  X(layernorm_backward)            \
  X(layernorm_backward_workspace)  \
  X(rmsnorm_forward)               \
  X(rmsnorm_residual_forward)      \
  X(rmsnorm_backward)              \
  X(rmsnorm_backward_workspace)    \
  X(rope_forward)                  \
  X(rope_backward)                 \
  X(swiglu_forward)                \
  X(swiglu_backward)               \
  X(linear_bias_grad)              \
  X(linear_bias_grad_workspace)    \
  X(attention_forward)             \
  X(attention_backward)            \
  X(attention_workspace)           \
  X(gelu_forward)                  \
  X(gelu_backward)                 \
  X(residual_forward)              \
  X(dropout)                       \
  X(cross_entropy_stats)           \
  X(cross_entropy_merge_stats)     \
  X(cross_entropy_loss)            \
  X(cross_entropy_backward)        \
  X(cross_entropy_workspace)       \
  X(cast)                          \
  X(adamw_update)                  \
  X(sum_squares)                   \
  X(sum_squares_workspace)
// clang-format on

// A backend's kernels: one function pointer per op, of the op's type.
struct Kernels {
  const char* backend;  // "cpu", "cuda"
#define TRAINER_KERNEL_FIELD(op) decltype(&::trainer::nn::op) op;
  TRAINER_OPS(TRAINER_KERNEL_FIELD)
#undef TRAINER_KERNEL_FIELD
};

// The table of `device`'s backend, or null where this build has none.
const Kernels* backend_kernels(Device device);
// The kernels of ctx's device; throws (naming the backend) where this build has none.
const Kernels& kernels(const Context& ctx);

// Each backend's kernel of every op, declared with the op's signature.
#define TRAINER_DECLARE_KERNEL(op) decltype(::trainer::nn::op) op;
namespace cpu {
TRAINER_OPS(TRAINER_DECLARE_KERNEL)
}  // namespace cpu
namespace cuda {
TRAINER_OPS(TRAINER_DECLARE_KERNEL)
}  // namespace cuda
#undef TRAINER_DECLARE_KERNEL

}  // namespace trainer::nn
