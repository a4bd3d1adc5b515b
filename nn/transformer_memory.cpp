// What a Transformer will allocate, before it does: its workspace (the largest scratch any op
// asks for), the bound that keeps the plan's sums in 64 bits (Note [Plan magnitude]), and the
// bytes of each buffer; `trainer plan` and the memory check read these.
#include <algorithm>

#include "nn/ops/attention.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/sum_squares.h"
#include "nn/transformer.h"
#include "runtime/error.h"
#include "runtime/gemm.h"

namespace trainer::nn {

int64_t Transformer::workspace_bytes(const ModelConfig& m, const ExecConfig& e,
                                     const Context& ctx) {
  const int64_t N = int64_t(e.max_rows) * e.max_seq_len, C = m.n_embd, V = m.local_vocab();
  const DType act = e.compute;
  size_t most = 0;
  const ArchSpec spec = arch_spec(m);
  for (const Matmul& mm : spec.block_matmuls)
    most = std::max(most, linear_workspace(ctx, N, mm.in, mm.out, act));
  const int64_t r = m.lora.rank;
  for (const Matmul& mm : spec.block_matmuls)  // its adapters' products (nn/lora.cpp)
    for (size_t b : {matmul_workspace_bytes(ctx, N, r, mm.in, act),
                     matmul_workspace_bytes(ctx, N, mm.out, r, act),
                     matmul_workspace_bytes(ctx, mm.out, r, N, act),
                     matmul_workspace_bytes(ctx, r, mm.in, N, act),
                     matmul_workspace_bytes(ctx, N, mm.in, r, act)})
      if (r > 0) most = std::max(most, b);
  for (size_t b :
       {embedding_backward_workspace(ctx, N, C), layernorm_backward_workspace(ctx, C),
        rmsnorm_backward_workspace(ctx, C),
        attention_workspace(ctx, e.max_rows, m.local_heads(), e.max_seq_len, m.max_seq_len,
                            m.head_size(), act, false),
        attention_workspace(ctx, e.max_rows, m.local_heads(), e.max_seq_len, e.max_seq_len,
                            m.head_size(), act, true),
        cross_entropy_workspace(ctx, N), sum_squares_workspace(ctx),
        matmul_workspace_bytes(ctx, N, V, C, act), matmul_workspace_bytes(ctx, N, C, V, act),
        matmul_workspace_bytes(ctx, V, C, N, act)})
    most = std::max(most, b);
  return int64_t(most);
}

// Note [Plan magnitude]
// Each key has a range, but their products do not: 2^20 rows of 2^20 tokens over a 2^24-word
// vocabulary is 2^64 logits. Before any plan is computed in 64-bit integers, a bound on every
// byte count it sums (parameters with masters, gradients, moments and buffers; activations,
// logits, attention scores and workspace, each with a margin of at least 2x over the plan's own
// formulas) is computed in 80-bit floating point, and sizes past 2^60 bytes are refused: no
// machine holds that, and below it no sum in the plans can overflow.
void Transformer::check_plan_magnitude(const ModelConfig& m, const ExecConfig& e) {
  using R = long double;
  const ArchSpec spec = arch_spec(m);  // its shapes are products of at most two keys' values
  auto elements = [](const std::vector<ParamSpec>& unit) {
    R n = 16 * R(unit.size());  // each tensor's alignment
    for (const ParamSpec& p : unit) {
      R numel = 1;
      for (int64_t d : p.shape) numel *= R(d);
      n += numel;
    }
    return n;
  };
  R block_acts = 0;  // elements per token
  for (const ActSpec& a : spec.block_acts) block_acts += R(a.per_token);
  const R C = m.n_embd, V = m.vocab_size, P = m.max_seq_len, L = m.n_layer, H = m.n_head,
          B = e.max_rows, T = e.max_seq_len, N = B * T;
  const R params = elements(spec.embedding) + L * elements(spec.block) + elements(spec.final);
  const R state = 24 * params;  // fp32 masters, working copy, gradients, AdamW m and v, buffers
  const R activations = 4 * N * L * (2 * block_acts + 16 * C) + 8 * N * V +
                        8 * B * H * T * std::max(T, P) * (L + 1) + 64 * N;
  const R bytes = state + 2 * activations;  // the workspace is at most the largest activation
  if (bytes > 0x1p60L)
    throw UsageError(fmt::format(
        "model and data sizes ask for about {:.2Le} bytes per rank (V = {}, C = {}, L = {}, "
        "{} rows of {} tokens): past what 64-bit sizes, and any machine, hold; `trainer plan` "
        "shows where the bytes go",
        bytes, m.vocab_size, m.n_embd, m.n_layer, e.max_rows, e.max_seq_len));
}

Transformer::Memory Transformer::planned_memory(const ModelConfig& m, const ExecConfig& e) {
  const int64_t total = ParamLayout(m).total(), N = int64_t(e.max_rows) * e.max_seq_len;
  Memory mem;
  const int64_t own = e.own_params ? total : 0;
  mem.params = own * 4;
  mem.working = e.compute == DType::f32 ? 0 : own * int64_t(dtype_size(e.compute));
  mem.grads = e.training ? own * int64_t(dtype_size(e.grad)) : 0;
  const int64_t slots = e.activation_slots;  // Note [Pipeline stages]
  mem.activations = ActivationPlan(m, e).bytes_for(e.activation_slots);
  mem.workspace = workspace_bytes(m, e, context_for(e));
  // per slot: tokens, targets, positions, segments, lengths, runs; the loss scale, scalars
  mem.inputs = (5 * N * 4 + (N + 1) * 4) * slots + 4 + 2 * 8;
  return mem;
}

}  // namespace trainer::nn
