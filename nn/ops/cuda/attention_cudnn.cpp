// cuDNN flash attention: which calls its fused SDPA engines serve, one plan cached per shape
// (the graphs are attention_cudnn_graphs.cpp's), and the calls themselves. See
// attention_cudnn.h.
//
// Note [cuDNN ragged batches]
// A packed batch (documents in rows, segment ids) goes to cuDNN as variable-length sequences:
// every run of the mask (AttentionMask::runs) is a batch entry of its own, so no query sees
// another document and no work is spent across documents. The graph's batch is the run count
// rounded up to a power of two (one plan per bucket), its sequence length the row length T;
// entries beyond the runs have length 0. Each tensor carries ragged offsets (int64, in its own
// elements, cuDNN 9.6 on): where run i starts, its first flat index f (b * T + t) times the
// tensor's token stride (the batch's end for the entries beyond), computed on the device from the
// runs (ragged_layout). The softmax statistics (and backward's row sums) are
// ragged too, token-major (N, H) as cuDNN's frontend lays them out, in our scratch; the lse
// (B, H, T) our own kernel and the CPU share is transposed from and to it. The runs cover every
// position, so nothing is left for a zeroing pass.

#include "nn/ops/cuda/attention_cudnn.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include <cuda_runtime.h>

#include "nn/ops/attention_cudnn_workspace.h"
#include "nn/ops/cuda/attention_cudnn_graphs.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cudnn_graph.h"
#include "runtime/cuda/memory.h"
#include "runtime/error.h"
#include "runtime/fallback.h"
#include "runtime/log.h"
#include "runtime/workspace.h"

namespace trainer::nn::cuda {

namespace {

// Whether cuDNN's engines are meant for this call: a training pass (all queries from position
// 0) in bf16; the own kernel serves the rest by design (fp32, decoding), which is no fallback.
bool meant_for_cudnn(const Context& ctx, const ConstTensor& q, const ConstTensor& k, int q_pos) {
  return ctx.cudnn_attention && q.dtype == DType::bf16 && q_pos == 0 && q.ndim == 3 &&
         k.ndim == 3 && k.dim(1) == q.dim(1) && q.dim(1) > 1;
}

// Why cuDNN's engines cannot serve a call meant for them, or empty when they can (Note
// [Attention masks]: the causal mask, with row lengths, or with segments that form runs, or
// neither), at the loaded version.
std::string ineligible(const ConstTensor& q, const AttentionMask& mask, int n_head) {
  if (!mask.segments.empty() && mask.runs.empty()) return "segments without runs";
  return cudnn_attention_ineligible(int64_t(cudnnGetVersion()), q.dim(1), q.dim(2) / n_head, n_head,
                                    !mask.segments.empty(), !mask.lengths.empty());
}

// The shape key of a call (q, k, v as (B, T, heads * D) views).
Shape shape_of(const Context& ctx, const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
               int n_head, const AttentionMask& mask) {
  const int64_t D = q.dim(2) / n_head;
  Shape s{ctx.device_index, q.dim(0), n_head, k.dim(2) / D, q.dim(1), D, q.ld(), k.ld(), v.ld()};
  s.padded = !mask.lengths.empty();
  s.ragged = !mask.segments.empty();
  if (s.ragged) s.B = cudnn_ragged_bucket(mask.runs.numel() - 1);
  return s;
}

// Makes e's plan within the planned engine workspace, or, when its configurations all need
// more, again within what the refusal stated, in a workspace of the entry's own where the
// device has room (cudnn_replan_workspace: the formula behind the plan is cudnn-frontend's
// estimate, which may not hold at every version and shape). Sets *why when there is none.
void make_plan(Entry& e, const Shape& s, std::string* why) {
  int64_t need = 0;
  e.plan = e.graph.build(s.device, s.engine_budget, why, &need);
  if (e.plan || need == 0) return;
  const int64_t again = cudnn_replan_workspace(s.engine_budget, need, int64_t(cuda_free_memory()));
  if (again == 0) return;
  std::string second;
  e.plan = e.graph.build(s.device, again, &second);
  if (!e.plan) return;
  e.workspace = Buffer(size_t(e.plan->workspace), Device::cuda, MemoryUse::other);
  log::info(
      "cuDNN attention {} (B={} H={} T={} head size {}) needs {} MiB of workspace, not the "
      "{} MiB planned: it has its own",
      s.backward ? "backward" : "forward", s.B, s.H, s.T, s.D, e.plan->workspace >> 20,
      s.engine_budget >> 20);
}

// The entry for `s`, built on first use (without a plan where cuDNN cannot run it).
Entry* entry(const Shape& s) {
  static std::mutex mu;
  static std::map<Shape, std::unique_ptr<Entry>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(s);
  if (it == cache.end()) {
    auto e = std::make_unique<Entry>();
    e->scale = 1.0f / std::sqrt(float(s.D));
    e->masked = masked_value();
    std::string why;
    try {
      if (s.backward)
        build_backward(*e, s);
      else
        build_forward(*e, s);
      make_plan(*e, s, &why);
    } catch (const Error& err) {
      why = err.what();
    }
    if (e->plan)
      log::debug("cuDNN attention {} (B={} H={} Hkv={} T={} head size {}{}): engine {}, {} MiB",
                 s.backward ? "backward" : "forward", s.B, s.H, s.Hk, s.T, s.D,
                 s.backward && !s.deterministic ? ", dQ accumulated" : "", e->plan->engine,
                 e->plan->workspace >> 20);
    else
      e->why = fmt::format("B={} H={} Hkv={} T={} head size {}: {}", s.B, s.H, s.Hk, s.T, s.D, why);
    it = cache.emplace(s, std::move(e)).first;
  }
  return it->second.get();
}

// Counts a call cuDNN could not take (runtime/fallback.h); false, for the caller to return.
bool fall_back(bool backward, const std::string& why) {
  fallback::note(backward ? "cudnn_attention_backward" : "cudnn_attention_forward", why);
  return false;
}

// A variant pack's pointer to a tensor: void* for the tensors cuDNN reads as well as for those
// it writes.
void* at(const Tensor& t) {
  return t.data;
}
void* at(const ConstTensor& t) {
  return const_cast<void*>(t.data);
}

// Appends the mask's data to a variant pack: the rows' lengths, or the runs' lengths and ragged
// offsets (made in `scratch`) for tensors of these token strides, in Ragged order.
void add_mask_data(std::vector<void*>& data, Workspace::Scope& scratch, const Context& ctx,
                   const Shape& s, const AttentionMask& mask, const RaggedStrides& strides) {
  if (s.padded) {
    data.push_back(at(mask.lengths));  // of the queries and of the keys
    data.push_back(at(mask.lengths));
  }
  if (!s.ragged) return;
  int32_t* lengths = scratch.take<int32_t>(s.B);
  // One aligned array per tensor (cuDNN reads them as 16-byte aligned tensors).
  std::array<int64_t*, kRaggedTensors> offsets{};
  for (int r = 0; r < strides.count; ++r) offsets[size_t(r)] = scratch.take<int64_t>(s.B + 1);
  ragged_layout(ctx, lengths, offsets.data(), mask.runs, s.B, strides);
  data.push_back(lengths);
  data.push_back(lengths);
  for (int r = 0; r < strides.count; ++r) data.push_back(offsets[size_t(r)]);
}

}  // namespace

size_t cudnn_attention_workspace(int64_t rows, int n_head, int64_t T, int64_t head_size, DType act,
                                 bool backward, bool deterministic) {
  if (act != DType::bf16 || head_size % 8 != 0 || head_size > 128) return 0;
  return size_t(
      cudnn_attention_workspace_plan(rows, n_head, T, head_size, backward, deterministic).total());
}

bool cudnn_attention_forward(const Context& ctx, const Tensor& out, const Tensor& lse,
                             const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                             const AttentionMask& mask, int n_head, int q_pos) {
  if (!meant_for_cudnn(ctx, q, k, q_pos)) return false;
  if (const std::string why = ineligible(q, mask, n_head); !why.empty())
    return fall_back(false, why);
  TRAINER_ASSERT(out.contiguous() && lse.contiguous(), "cuDNN attention forward outputs");
  Shape s = shape_of(ctx, q, k, v, n_head, mask);
  const int64_t rows = q.dim(0);
  s.engine_budget = cudnn_attention_workspace_plan(rows, n_head, s.T, s.D, false, true).engine;
  Entry* e = entry(s);
  if (!e->plan) return fall_back(false, e->why);
  Workspace::Scope scratch(ctx.workspace);
  // Ragged statistics are token-major, in our scratch.
  void* stats = s.ragged ? scratch.take<float>(rows * s.T * s.H) : at(lse);
  std::vector<void*> data = {at(q), at(k), at(v), at(out), stats, &e->scale, &e->masked};
  add_mask_data(data, scratch, ctx, s, mask, {kDq, {s.ldq, s.ldk, s.ldv, s.H * s.D, s.H}});
  void* ws = e->workspace.bytes() ? e->workspace.data() : scratch.take<char>(e->plan->workspace);
  e->plan->execute(ctx.stream, e->uids, data, ws);
  if (s.ragged)
    transpose_lse(ctx, static_cast<float*>(at(lse)), static_cast<float*>(stats), rows, s.H, s.T,
                  false);
  return true;
}

bool cudnn_attention_backward(const Context& ctx, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const ConstTensor& dout, const ConstTensor& out,
                              const ConstTensor& lse, const ConstTensor& q, const ConstTensor& k,
                              const ConstTensor& v, const AttentionMask& mask, int n_head) {
  if (!meant_for_cudnn(ctx, q, k, 0)) return false;
  if (const std::string why = ineligible(q, mask, n_head); !why.empty())
    return fall_back(true, why);
  TRAINER_ASSERT(
      out.contiguous() && dout.contiguous() && lse.contiguous() && dq.dtype == DType::bf16,
      "cuDNN attention backward operands");
  Shape s = shape_of(ctx, q, k, v, n_head, mask);
  s.backward = true;
  s.deterministic = ctx.deterministic;
  s.ld_dq = dq.ld();
  s.ld_dk = dk.ld();
  s.ld_dv = dv.ld();
  const int64_t rows = q.dim(0), N = rows * s.T;
  s.engine_budget =
      cudnn_attention_workspace_plan(rows, n_head, s.T, s.D, true, s.deterministic).engine;
  Entry* e = entry(s);
  if (!e->plan) return fall_back(true, e->why);
  Workspace::Scope scratch(ctx.workspace);
  float* rowsum = scratch.take<float>(N * s.H);
  void* stats = at(lse);
  if (s.ragged) {  // token-major, in our scratch
    stats = scratch.take<float>(N * s.H);
    transpose_lse(ctx, static_cast<float*>(at(lse)), static_cast<float*>(stats), rows, s.H, s.T,
                  true);
  }
  std::vector<void*> data = {at(q),  at(k),  at(v),     at(out), at(dout),   stats, at(dq),
                             at(dk), at(dv), &e->scale, &e->one, &e->masked, rowsum};
  if (!s.deterministic) {
    // (B, H, T, D), or N tokens of dQ's row stride when ragged (Note [cuDNN attention workspace]).
    const int64_t count = s.ragged ? N * s.ld_dq : N * s.H * s.D;
    float* dq_acc = scratch.take<float>(count);
    // cuDNN zeroes the accumulator itself from 9.6 on.
    if (cudnnGetVersion() < 90600)
      CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, size_t(count) * sizeof(float),
                                 static_cast<cudaStream_t>(ctx.stream)));
    data.push_back(dq_acc);
  }
  add_mask_data(data, scratch, ctx, s, mask,
                {kRaggedTensors, {s.ldq, s.ldk, s.ldv, s.H * s.D, s.H, s.ld_dq, s.ld_dk, s.ld_dv}});
  void* ws = e->workspace.bytes() ? e->workspace.data() : scratch.take<char>(e->plan->workspace);
  e->plan->execute(ctx.stream, e->uids, data, ws);
  return true;
}

}  // namespace trainer::nn::cuda
