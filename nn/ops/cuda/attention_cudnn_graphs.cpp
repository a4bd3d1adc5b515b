// The forward and backward graphs of cuDNN's fused attention, composed with the backend API
// the way cuDNN's frontend library composes them. See attention_cudnn_graphs.h.
//
// Note [cuDNN attention graphs]
// Tensors are 4-D, [batch, head, sequence, head dim]; the layout is in the strides, so q, k and
// v are read where they lie in the packed qkv rows (row stride ld: strides {T ld, D, ld, 1}) and
// k enters the first product transposed by swapping its last two strides. With row lengths
// (one tensor of the queries' and one of the keys', as the frontend composes them), every
// product is cut to them (cuDNN's M/N/K overrides: queries' rows, keys' columns or inner
// length), the first product's entries beyond them are 0 (its padding value), and the scores
// are masked to them before the causal mask (cuDNN 9.0 to 9.9 mask again after subtracting the
// statistics in backward, as the frontend does for them). Forward:
//   S = (Q K^T) * scale; S = select(row >= col, S, -inf)           (causal)
//   M = max_j S; E = exp(S - M); L = sum_j E; Stats = M + log L;  O = (E / L, as bf16) V
// Backward:
//   D = sum_d dO * O;  P = exp(select(causal, (Q K^T) * scale - Stats, -inf))
//   dV = P^T dO;  dS = P * (dO V^T - D) * scale;  dK = dS^T Q;  dQ = dS K
// with P^T and dS^T as bf16 views, and with grouped heads dK and dV summed over each group.
// Deterministic (Context::deterministic, the default), dQ is written straight from its product
// (Hopper's engines keep dP in a workspace of B H T^2 2 bytes: Note [cuDNN attention
// workspace]); otherwise it goes to an fp32 accumulator in our scratch (atomic adds, in an order
// that varies) and is copied to dQ, as the frontend's default graph does.
//
#include "nn/ops/cuda/attention_cudnn_graphs.h"

#include <limits>

#include "runtime/error.h"

namespace trainer::nn::cuda {

using cudnn::Dims;

namespace {

// Strides of a (B, T, H*D) view with row stride ld, as [B, H, T, D], and transposed [B, H, D, T].
Dims seq_major(int64_t T, int64_t D, int64_t ld) {
  return {T * ld, D, ld, 1};
}
Dims transposed(int64_t T, int64_t D, int64_t ld) {
  return {T * ld, D, 1, ld};
}
Dims packed(const Dims& d) {
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}
// Strides of [B, H, T, 1] statistics: (B, H, T), or token-major (B, T, H) when ragged.
Dims stats_strides(const Shape& s) {
  return s.ragged ? Dims{s.T * s.H, 1, s.H, 1} : Dims{s.H * s.T, s.T, 1, 1};
}

// The ragged offset tensors of a graph (ids 0 where it is not ragged), in Ragged order.
struct Offsets {
  int64_t id[kRaggedTensors] = {};
  int64_t operator[](Ragged r) const { return id[r]; }
};
int ragged_count(const Shape& s) {
  if (!s.ragged) return 0;
  return s.backward ? kRaggedTensors : kDq;
}
Offsets offsets(cudnn::Graph& g, const Shape& s) {
  Offsets o;
  for (int r = 0; r < ragged_count(s); ++r)
    o.id[r] = g.tensor(CUDNN_DATA_INT64, {s.B + 1, 1, 1, 1}, {1, 1, 1, 1});
  return o;
}

// The per-entry sequence lengths of queries and of keys (ids 0 without lengths): the same
// values in self-attention, two tensors as cuDNN's frontend composes them.
struct Lengths {
  int64_t q = 0, kv = 0;
  explicit operator bool() const { return q != 0; }
};

// The variant pack's ids after the data tensors and scalars: lengths, then the offsets.
void add_mask_ids(std::vector<int64_t>& uids, const Lengths& len, const Offsets& o,
                  const Shape& s) {
  if (len) {
    uids.push_back(len.q);
    uids.push_back(len.kv);
  }
  for (int r = 0; r < ragged_count(s); ++r) uids.push_back(o.id[r]);
}

// Masks S (scores, [B,H,T,T]) to the causal triangle: a new virtual tensor.
int64_t causal(cudnn::Graph& g, int64_t S, const Dims& ss, int64_t masked) {
  const Dims st = packed(ss);
  const int64_t row = g.tensor(CUDNN_DATA_INT32, ss, st, true);
  const int64_t col = g.tensor(CUDNN_DATA_INT32, ss, st, true);
  const int64_t keep = g.tensor(CUDNN_DATA_BOOLEAN, ss, st, true);
  const int64_t out = g.tensor(CUDNN_DATA_FLOAT, ss, st, true);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, S, row, 0, 0, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, S, col, 0, 0, CUDNN_DATA_INT32, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, 0, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, S, out, masked, keep);
  return out;
}

// The rows' (or runs') lengths, as cuDNN's per-batch sequence lengths of queries and keys.
Lengths lengths_tensors(cudnn::Graph& g, const Shape& s) {
  if (!s.padded && !s.ragged) return {};
  return {g.tensor(CUDNN_DATA_INT32, {s.B, 1, 1, 1}, {1, 1, 1, 1}),
          g.tensor(CUDNN_DATA_INT32, {s.B, 1, 1, 1}, {1, 1, 1, 1})};
}

// Masks S to the rows' lengths: query i below the queries' length, key j below the keys'.
int64_t padding(cudnn::Graph& g, int64_t S, const Dims& ss, const Lengths& len, int64_t masked) {
  const Dims st = packed(ss);
  const int64_t row = g.tensor(CUDNN_DATA_INT32, ss, st, true);
  const int64_t col = g.tensor(CUDNN_DATA_INT32, ss, st, true);
  const int64_t in_q = g.tensor(CUDNN_DATA_BOOLEAN, ss, st, true);
  const int64_t in_k = g.tensor(CUDNN_DATA_BOOLEAN, ss, st, true);
  const int64_t keep = g.tensor(CUDNN_DATA_BOOLEAN, ss, st, true);
  const int64_t out = g.tensor(CUDNN_DATA_FLOAT, ss, st, true);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, S, row, 0, 0, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, S, col, 0, 0, CUDNN_DATA_INT32, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, row, in_q, len.q, 0, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, col, in_k, len.kv, 0, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, in_q, keep, in_k, 0, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, S, out, masked, keep);
  return out;
}

}  // namespace

float masked_value() {
  return cudnnGetVersion() >= 91000 ? -std::numeric_limits<float>::infinity()
                                    : std::numeric_limits<float>::lowest();
}

void build_forward(Entry& e, const Shape& s) {
  cudnn::Graph& g = e.graph;
  const Dims qd{s.B, s.H, s.T, s.D}, kd{s.B, s.Hk, s.T, s.D}, ss{s.B, s.H, s.T, s.T};
  const Dims row{s.B, s.H, s.T, 1}, scalar{1, 1, 1, 1};
  const Offsets off = offsets(g, s);
  const int64_t Q =
      g.tensor(CUDNN_DATA_BFLOAT16, qd, seq_major(s.T, s.D, s.ldq), false, false, off[kQ]);
  const int64_t KT = g.tensor(CUDNN_DATA_BFLOAT16, {s.B, s.Hk, s.D, s.T},
                              transposed(s.T, s.D, s.ldk), false, false, off[kK]);
  const int64_t V =
      g.tensor(CUDNN_DATA_BFLOAT16, kd, seq_major(s.T, s.D, s.ldv), false, false, off[kV]);
  const int64_t O =
      g.tensor(CUDNN_DATA_BFLOAT16, qd, seq_major(s.T, s.D, s.H * s.D), false, false, off[kO]);
  const int64_t Stats =
      g.tensor(CUDNN_DATA_FLOAT, row, stats_strides(s), false, false, off[kStats]);
  const int64_t scale = g.tensor(CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  const int64_t masked = g.tensor(CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  const Lengths len = lengths_tensors(g, s);
  auto virt = [&](const Dims& d, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
    return g.tensor(t, d, packed(d), true);
  };
  const int64_t S0 = virt(ss), S1 = virt(ss);
  // Scores beyond the lengths are 0 before the mask replaces them (the frontend's bmm1).
  g.matmul(Q, KT, S0, len.q, len.kv, 0, len ? std::optional(0.0) : std::nullopt);
  g.pointwise(CUDNN_POINTWISE_MUL, S0, S1, scale);
  const int64_t S = causal(g, len ? padding(g, S1, ss, len, masked) : S1, ss, masked);
  const int64_t M = virt(row), Z = virt(ss), E = virt(ss), L = virt(row), logL = virt(row);
  const int64_t P = virt(ss, CUDNN_DATA_BFLOAT16);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, S, M);
  g.pointwise(CUDNN_POINTWISE_SUB, S, Z, M);
  g.pointwise(CUDNN_POINTWISE_EXP, Z, E);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, E, L);
  g.pointwise(CUDNN_POINTWISE_LOG, L, logL);
  g.pointwise(CUDNN_POINTWISE_ADD, M, Stats, logL);
  g.pointwise(CUDNN_POINTWISE_DIV, E, P, L);
  g.matmul(P, V, O, len.q, 0, len.kv);
  e.uids = {Q, KT, V, O, Stats, scale, masked};
  add_mask_ids(e.uids, len, off, s);
}

void build_backward(Entry& e, const Shape& s) {
  cudnn::Graph& g = e.graph;
  const Dims qd{s.B, s.H, s.T, s.D}, kd{s.B, s.Hk, s.T, s.D}, ss{s.B, s.H, s.T, s.T};
  const Dims row{s.B, s.H, s.T, 1}, scalar{1, 1, 1, 1}, kt{s.B, s.Hk, s.D, s.T};
  const Dims o_strides = seq_major(s.T, s.D, s.H * s.D);
  const Offsets off = offsets(g, s);
  auto data = [&](const Dims& d, const Dims& strides, Ragged r) {
    return g.tensor(CUDNN_DATA_BFLOAT16, d, strides, false, false, off[r]);
  };
  const int64_t Q = data(qd, seq_major(s.T, s.D, s.ldq), kQ);
  const int64_t KT = data(kt, transposed(s.T, s.D, s.ldk), kK);
  const int64_t VT = data(kt, transposed(s.T, s.D, s.ldv), kV);
  const int64_t O = data(qd, o_strides, kO);
  const int64_t dO = data(qd, o_strides, kO);  // O's strides (and offsets), as cuDNN wants
  const int64_t Stats =
      g.tensor(CUDNN_DATA_FLOAT, row, stats_strides(s), false, false, off[kStats]);
  const int64_t dQ = data(qd, seq_major(s.T, s.D, s.ld_dq), kDq);
  const int64_t dK = data(kd, seq_major(s.T, s.D, s.ld_dk), kDk);
  const int64_t dV = data(kd, seq_major(s.T, s.D, s.ld_dv), kDv);
  const int64_t scale = g.tensor(CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  const int64_t one = g.tensor(CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  const int64_t masked = g.tensor(CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  // In our workspace, laid out as the statistics.
  const int64_t rowsum =
      g.tensor(CUDNN_DATA_FLOAT, row, stats_strides(s), false, false, off[kStats]);
  // Not deterministic: dQ accumulated in fp32 in our workspace, then copied to dQ. Laid out as
  // the frontend lays it out: (B, H, T, D) packed, or with dQ's strides and ragged offsets.
  const Dims acc_strides =
      s.ragged ? seq_major(s.T, s.D, s.ld_dq) : Dims{s.H * s.T * s.D, s.T * s.D, s.D, 1};
  const int64_t dQacc =
      s.deterministic ? 0 : g.tensor(CUDNN_DATA_FLOAT, qd, acc_strides, false, false, off[kDq]);
  const Lengths len = lengths_tensors(g, s);
  auto virt = [&](const Dims& d, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
    return g.tensor(t, d, packed(d), true);
  };
  // D = sum over the head dimension of dO * O.
  const int64_t t0 = virt(qd), t1 = virt(row);
  g.pointwise(CUDNN_POINTWISE_MUL, dO, t0, O);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, t0, t1);
  g.pointwise(CUDNN_POINTWISE_MUL, t1, rowsum, one);
  // P, recomputed from the saved statistics. cuDNN 9.0 to 9.9 also mask after the subtraction,
  // as the frontend composes it for them.
  const int64_t s0 = virt(ss), s1 = virt(ss), s2 = virt(ss), expS = virt(ss);
  g.matmul(Q, KT, s0, len.q, len.kv, 0, len ? std::optional(0.0) : std::nullopt);
  g.pointwise(CUDNN_POINTWISE_MUL, s0, s1, scale);
  g.pointwise(CUDNN_POINTWISE_SUB, len ? padding(g, s1, ss, len, masked) : s1, s2, Stats);
  const bool mask_twice = len && cudnnGetVersion() >= 90000 && cudnnGetVersion() < 91000;
  const int64_t s3 = causal(g, mask_twice ? padding(g, s2, ss, len, masked) : s2, ss, masked);
  g.pointwise(CUDNN_POINTWISE_EXP, s3, expS);
  // (B, H, Tk, Tq) views of an (B, H, Tq, Tk) score tensor, as bf16 product inputs.
  const Dims st{s.B, s.H, s.T, s.T}, st_strides{s.H * s.T * s.T, s.T * s.T, 1, s.T};
  // out = a b for a key/value gradient (rows: keys, inner: queries): per query head, summed
  // over each group of query heads that shares a key/value head.
  auto kv_product = [&](int64_t a, int64_t b, int64_t out) {
    if (s.Hk == s.H) return g.matmul(a, b, out, len.kv, 0, len.q);
    const int64_t per_head = virt(qd, CUDNN_DATA_BFLOAT16);
    g.matmul(a, b, per_head, len.kv, 0, len.q);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_head, out);
  };
  // dV = P^T dO.
  const int64_t PT = g.tensor(CUDNN_DATA_BFLOAT16, st, st_strides, true);
  g.reshape(expS, PT);
  kv_product(PT, dO, dV);
  // dS = P * (dO V^T - D) * scale.
  const int64_t dP = virt(ss), u1 = virt(ss), u2 = virt(ss), dS = virt(ss);
  g.matmul(dO, VT, dP, len.q, len.kv);
  g.pointwise(CUDNN_POINTWISE_SUB, dP, u1, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, u1, u2, expS);
  g.pointwise(CUDNN_POINTWISE_MUL, u2, dS, scale);
  // dK = dS^T Q.
  const int64_t dST = g.tensor(CUDNN_DATA_BFLOAT16, st, st_strides, true);
  g.reshape(dS, dST);
  kv_product(dST, Q, dK);
  // dQ = dS K, K seen untransposed (with K's offsets, as cuDNN's frontend gives it).
  const int64_t K =
      g.tensor(CUDNN_DATA_FLOAT, kd, seq_major(s.T, s.D, s.ldk), true, false, off[kK]);
  g.reshape(KT, K);
  if (s.deterministic) {
    g.matmul(dS, K, dQ, len.q, 0, len.kv);
  } else {
    g.matmul(dS, K, dQacc, len.q, 0, len.kv);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, dQacc, dQ);
  }
  e.uids = {Q, KT, VT, O, dO, Stats, dQ, dK, dV, scale, one, masked, rowsum};
  if (dQacc) e.uids.push_back(dQacc);
  add_mask_ids(e.uids, len, off, s);
}

}  // namespace trainer::nn::cuda
