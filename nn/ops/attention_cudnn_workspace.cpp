// cuDNN attention's planned workspace; see attention_cudnn_workspace.h.
//
// Note [cuDNN attention workspace]
// The model's workspace is sized once from every op's bound, so the cuDNN path's share is
// planned too, before any plan exists (and on machines without a GPU, for `trainer plan`):
//   scratch: the token-major statistics of packed rows (N x H floats), backward's row sums of
//     dO * O (N x H), the runs' lengths and up to 8 ragged offset arrays of the largest bucket,
//     and the non-deterministic backward's fp32 dQ accumulator (N x H x D, or N tokens of dQ's
//     row stride for a packed batch, as cuDNN's frontend lays it out: planned as N x 3 H D);
//   engine: cuDNN's own workspace, which only the plan knows. The deterministic backward on
//     Hopper keeps dP in tiles of 64 (cudnn-frontend sizes it rows * H * ceil64(T)^2 * 2 bytes:
//     192 MiB at the 124M shape, B=8, T=1024), planned up to kCudnnDeterministicCap; anything
//     else gets kCudnnEngineAllowance.
// At run time a plan is chosen among cuDNN's engine configurations that fit the planned engine
// workspace (runtime/cuda/cudnn_graph.h). The formula above is cudnn-frontend's estimate for
// 9.0; where every configuration needs more, the shape is planned again from the least need
// the refusal stated, in a workspace of its own, if the device holds it with 1 GiB to spare
// (cudnn_replan_workspace); a shape that still fits nothing runs the own kernel, counted as a
// fallback (runtime/fallback.h). A packed batch's graph has a bucket of runs for a batch, so
// its deterministic dP needs bucket / rows times the plan: packed batches of many documents
// fit only the non-deterministic backward (train.attention_backward: fast).
#include "nn/ops/attention_cudnn_workspace.h"

#include <fmt/format.h>

#include "runtime/workspace.h"

namespace trainer::nn {

std::string cudnn_attention_ineligible(int64_t version, int64_t T, int64_t head_size, int n_head,
                                       bool segments, bool lengths) {
  // Known bugs in their bf16 attention kernels; cudnn-frontend refuses them too.
  if (version == 91000 || version == 91001)
    return fmt::format("cuDNN {} has known bugs in its bf16 attention (9.10.0 and 9.10.1)",
                       version);
  if (head_size % 8 != 0 || head_size > 128)
    return fmt::format("head size {} (cuDNN's engines take multiples of 8 up to 128)", head_size);
  if (segments) {
    if (lengths) return "segments and lengths together";
    if (head_size % 16 != 0)
      return fmt::format("packed rows with head size {} (not a multiple of 16)", head_size);
    // Ragged statistics start at f * n_head floats: 16-byte aligned with n_head % 4 == 0.
    if (n_head % 4 != 0)
      return fmt::format("packed rows with {} heads (ragged statistics need a multiple of 4)",
                         n_head);
    if (version < 90600) return "packed rows before cuDNN 9.6";
  }
  // cudnn-frontend issue 160: a backward without lengths could go wrong.
  if (!lengths && !segments && T % 128 != 0 && version < 91501)
    return fmt::format("T = {} is not a multiple of 128 before cuDNN 9.15.1", T);
  return {};
}

int64_t cudnn_replan_workspace(int64_t planned, int64_t least_need, int64_t free_bytes) {
  if (least_need <= planned) return 0;
  return least_need <= free_bytes - kCudnnReplanReserve ? least_need : 0;
}

int64_t cudnn_ragged_bucket(int64_t runs) {
  int64_t b = 8;
  while (b < runs) b *= 2;
  return b;
}

CudnnAttentionWorkspace cudnn_attention_workspace_plan(int64_t rows, int n_head, int64_t T,
                                                       int64_t head_size, bool backward,
                                                       bool deterministic) {
  const int64_t N = rows * T, H = n_head, bucket = cudnn_ragged_bucket(N);
  CudnnAttentionWorkspace w;
  w.scratch = int64_t(Workspace::bytes_for<float>(N * H) * (backward ? 2 : 1) +
                      Workspace::bytes_for<int32_t>(bucket) +
                      kMaxRaggedTensors * Workspace::bytes_for<int64_t>(bucket + 1));
  if (backward && !deterministic)
    w.scratch += int64_t(Workspace::bytes_for<float>(N * 3 * H * head_size));
  w.engine = kCudnnEngineAllowance;
  if (backward && deterministic) {
    const int64_t t64 = (T + 63) / 64 * 64;
    const int64_t dp = rows * H * t64 * t64 * 2 + kCudnnEngineAllowance;
    if (dp <= kCudnnDeterministicCap) w.engine = dp;
  }
  return w;
}

}  // namespace trainer::nn
