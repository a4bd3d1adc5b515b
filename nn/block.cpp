// What every architecture's block functions share: the packed q/k/v views, attention with the
// KV cache and its backward, the bf16 copy of the residual gradient the branches read, and
// tensor parallelism applied to each product as the spec cuts it.
#include "nn/block.h"

#include <algorithm>

#include "nn/lora.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/dropout.h"
#include "runtime/memory.h"

namespace trainer::nn {

std::array<Tensor, 3> block_access::qkv_parts(const BlockTensors& t, const Tensor& packed) {
  const ModelConfig& m = *t.model;
  const int64_t hs = m.head_size(), C = int64_t(m.local_heads()) * hs,
                Ckv = int64_t(m.local_kv_heads()) * hs;
  const Tensor rows = packed.reshape({t.B, t.T, C + 2 * Ckv});
  if (!m.kv_heads_whole())
    return {rows.col_range(0, C), rows.col_range(C, Ckv), rows.col_range(C + Ckv, Ckv)};
  // Every key/value head is here (more ranks than heads): the one this slice's queries use.
  const int64_t at = m.used_kv_head() * hs;
  return {rows.col_range(0, C), rows.col_range(C + at, hs), rows.col_range(C + Ckv + at, hs)};
}

void block_access::attend(const Context& ctx, const BlockTensors& t, const ConstTensor& q,
                          const ConstTensor& k, const ConstTensor& v) {
  const Tensor out = A(t, Act::atty).reshape({t.B, t.T, q.cols()});
  if (t.k_cache.empty())
    return attention_forward(ctx, out, A(t, Act::att_lse), q, k, v, t.mask, t.n_head, t.q_pos);
  const int64_t seen = t.q_pos + t.T, Ckv = k.cols();
  cast(ctx, t.k_cache.row_range(t.q_pos, t.T), k);
  cast(ctx, t.v_cache.row_range(t.q_pos, t.T), v);
  attention_forward(
      ctx, out, A(t, Act::att_lse), q, t.k_cache.row_range(0, seen).reshape({1, seen, Ckv}),
      t.v_cache.row_range(0, seen).reshape({1, seen, Ckv}), t.mask, t.n_head, t.q_pos);
}

void block_access::attend_backward(const Context& ctx, const BlockTensors& t,
                                   const std::array<Tensor, 3>& d,
                                   const std::array<Tensor, 3>& qkv) {
  const int64_t C = qkv[0].cols();
  // The key/value heads this slice holds but does not use get no gradient from it.
  if (t.model->kv_heads_whole()) fill_zero(ctx, A(t, Act::d_qkv));
  attention_backward(ctx, d[0], d[1], d[2], A(t, Act::d_atty).reshape({t.B, t.T, C}),
                     A(t, Act::atty).reshape({t.B, t.T, C}), A(t, Act::att_lse), qkv[0], qkv[1],
                     qkv[2], t.mask, t.n_head);
}

namespace {

// `buffer` seen as every token of `like` (N rows of like's columns and dtype).
Tensor whole(const BlockTensors& t, const Tensor& buffer, const Tensor& like) {
  const int64_t N = int64_t(t.B) * t.T;
  return make_tensor(buffer.data, like.dtype, {N, like.cols()}, buffer.device);
}

// x, every token of it: gathered from the slices under sequence parallelism.
Tensor gather_tokens(const BlockTensors& t, const Tensor& x) {
  if (t.gathered.empty()) return x;
  const Tensor all = whole(t, t.gathered, x);
  t.group->all_gather(all, x);
  return all;
}

// Where each rank's partial sums of `target` are made: target itself, or every token of it.
Tensor partials_of(const BlockTensors& t, const Tensor& target) {
  return t.partial.empty() ? target : whole(t, t.partial, target);
}

// target = the group's sum of partials_of(target): in place, or scattered to each rank's tokens.
void sum_into(const BlockTensors& t, const Tensor& target) {
  if (t.partial.empty()) return t.group->all_reduce(target);
  t.group->reduce_scatter(target, partials_of(t, target));
}

// How the spec cuts the product whose weight is `weight`.
const Matmul& product(const BlockTensors& t, Role weight) {
  const auto m = std::find_if(t.products->begin(), t.products->end(),
                              [&](const Matmul& p) { return p.weight == weight; });
  TRAINER_ASSERT(m != t.products->end(), "a block product that its architecture's spec lacks");
  return *m;
}

}  // namespace

void block_access::product_forward(const Context& ctx, const BlockTensors& t, Role weight,
                                   const Tensor& y, const Tensor& x, const ProductForward& op) {
  const Matmul& m = product(t, weight);
  const Tensor bias = m.bias == Role::kCount ? Tensor{} : W(t, m.bias);
  auto run = [&](const Tensor& out, const Tensor& in, const Tensor& b) {
    op(out, in, b);
    adapters_forward(ctx, t, weight, out, in);
  };
  if (!t.group || m.parallel == Parallel::none) return run(y, x, bias);
  if (m.parallel == Parallel::column) return run(y, gather_tokens(t, x), bias);
  run(partials_of(t, y), x, t.group->rank() == 0 ? bias : Tensor{});
  sum_into(t, y);
}

void block_access::product_backward(const Context& ctx, const BlockTensors& t, Role weight,
                                    const Tensor& dx, const Tensor& dy, const Tensor& x,
                                    const ProductBackward& op) {
  const Matmul& m = product(t, weight);
  auto run = [&](const Tensor& din, const Tensor& dout, const Tensor& in) {
    op(din, dout, in);
    adapters_backward(ctx, t, weight, din, dout, in);
  };
  if (!t.group || m.parallel != Parallel::column) return run(dx, dy, x);
  run(partials_of(t, dx), dy, gather_tokens(t, x));
  sum_into(t, dx);
}

void block_access::drop_branch(const Context& ctx, const BlockTensors& t, Branch branch) {
  const DropoutMask& mask = t.branch_drop[size_t(branch)];
  if (mask.on()) dropout(ctx, t.tmp, t.tmp, mask);
}

Tensor block_access::branch_grad(const Context& ctx, const BlockTensors& t, Branch branch) {
  const DropoutMask& mask = t.branch_drop[size_t(branch)];
  if (mask.on())
    dropout(ctx, t.d_branch, t.d_res, mask);
  else if (!t.d_branch.empty() && t.d_branch.dtype != t.d_res.dtype)
    cast(ctx, t.d_branch, t.d_res);
  else
    return gather_tokens(t, t.d_res);
  return gather_tokens(t, t.d_branch);
}

}  // namespace trainer::nn
