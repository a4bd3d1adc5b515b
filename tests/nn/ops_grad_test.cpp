// Every op's backward against finite differences of its forward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "grad_check.h"
#include "nn/ops/attention.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"

namespace trainer::nn {

using testing::expect_gradient;
using testing::random_vector;
using testing::weighted_sum;

TEST(OpsGrad, LayerNorm) {
  const int N = 5, C = 24;
  auto x = random_vector(N * C, 1), w = random_vector(C, 2), b = random_vector(C, 3);
  auto r = random_vector(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return weighted_sum(out.data(), r);
  };
  loss();
  std::vector<float> dx(N * C, 0), dw(C, 0), db(C, 0);
  layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
}

TEST(OpsGrad, Linear) {
  const int N = 6, I = 10, O = 7;
  auto x = random_vector(N * I, 1), w = random_vector(I * O, 2), b = random_vector(O, 3);
  auto r = random_vector(N * O, 4);
  std::vector<float> out(N * O);
  auto loss = [&] {
    linear_forward(out.data(), x.data(), w.data(), b.data(), N, I, O);
    return weighted_sum(out.data(), r);
  };
  std::vector<float> dx(N * I), dw(I * O, 0), db(O, 0);
  linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), N, I, O);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
}

TEST(OpsGrad, Gelu) {
  const int n = 200;
  auto x = random_vector(n, 1, 2.0f), r = random_vector(n, 2);
  std::vector<float> out(n), dx(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return weighted_sum(out.data(), r);
  };
  gelu_backward(dx.data(), r.data(), x.data(), n);
  expect_gradient("dx", x, dx, loss, 200);
}

TEST(OpsGrad, Embedding) {
  const int N = 7, C = 6, V = 5, P = 8;
  std::vector<int32_t> tok = {0, 3, 3, 1, 4, 0, 3}, pos = {0, 1, 2, 0, 1, 2, 3};
  auto wte = random_vector(V * C, 1), wpe = random_vector(P * C, 2), r = random_vector(N * C, 3);
  std::vector<float> out(N * C);
  auto loss = [&] {
    embedding_forward(out.data(), tok.data(), pos.data(), wte.data(), wpe.data(), N, C, V, P);
    return weighted_sum(out.data(), r);
  };
  std::vector<float> dwte(V * C, 0), dwpe(P * C, 0);
  embedding_backward(dwte.data(), dwpe.data(), r.data(), tok.data(), pos.data(), N, C);
  expect_gradient("dwte", wte, dwte, loss, 100);
  expect_gradient("dwpe", wpe, dwpe, loss, 100);
}

TEST(OpsGrad, CrossEntropy) {
  const int N = 6, V = 11;
  auto logits = random_vector(N * V, 1, 2.0f);
  std::vector<int32_t> targets = {3, -1, 0, 10, 5, -1};
  std::vector<float> work(N * V);
  auto loss = [&] {
    work = logits;
    return cross_entropy_forward(work.data(), targets.data(), N, V).sum;
  };
  LossSum ls = [&] {
    work = logits;
    return cross_entropy_forward(work.data(), targets.data(), N, V);
  }();
  EXPECT_EQ(ls.count, 4);
  cross_entropy_backward(work.data(), targets.data(), N, V, 1.0f);
  std::vector<float> dlogits = work;
  expect_gradient("dlogits", logits, dlogits, loss, 66);
}

// Attention under each kind of mask: causal only, packed segments, padded lengths.
class AttentionGrad : public ::testing::TestWithParam<int> {};

TEST_P(AttentionGrad, MatchesFiniteDifferences) {
  const int B = 2, T = 9, C = 8, H = 2;
  AttentionShape shape{B, T, C, H};
  std::vector<int32_t> segments = {0, 0, 0, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  std::vector<int32_t> lengths = {9, 6};
  AttentionMask mask;
  if (GetParam() == 1) mask.segments = segments.data();
  if (GetParam() == 2) mask.lengths = lengths.data();
  auto qkv = random_vector(B * T * 3 * C, 1), r = random_vector(B * T * C, 2);
  std::vector<float> out(B * T * C), lse(B * H * T), dqkv(B * T * 3 * C);
  auto loss = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), mask, shape);
    return weighted_sum(out.data(), r);
  };
  loss();
  attention_backward(dqkv.data(), r.data(), out.data(), lse.data(), qkv.data(), mask, shape);
  expect_gradient("dqkv", qkv, dqkv, loss, 200);
}

INSTANTIATE_TEST_SUITE_P(Masks, AttentionGrad, ::testing::Values(0, 1, 2));

TEST(Attention, LongSequencesSpanSeveralTiles) {
  // T > the 64-query tile, against a direct softmax reference for one head.
  const int B = 1, T = 150, C = 4, H = 1;
  auto qkv = random_vector(B * T * 3 * C, 5);
  std::vector<float> out(T * C), lse(T);
  attention_forward(out.data(), lse.data(), qkv.data(), {}, {B, T, C, H});
  for (int i : {0, 63, 64, 100, 149}) {
    std::vector<double> p(i + 1);
    double mx = -1e30, z = 0;
    for (int j = 0; j <= i; ++j) {
      double s = 0;
      for (int d = 0; d < C; ++d) s += double(qkv[i * 3 * C + d]) * qkv[j * 3 * C + C + d];
      p[j] = s / 2.0;  // sqrt(hs) = 2
      mx = std::max(mx, p[j]);
    }
    for (double& v : p) z += (v = std::exp(v - mx));
    for (int d = 0; d < C; ++d) {
      double o = 0;
      for (int j = 0; j <= i; ++j) o += p[j] / z * qkv[j * 3 * C + 2 * C + d];
      EXPECT_NEAR(out[i * C + d], o, 1e-5) << "query " << i;
    }
  }
}

TEST(Attention, NoAttentionAcrossSegments) {
  // Changing a token of document 0 must leave every output of document 1 untouched.
  const int B = 1, T = 10, C = 4, H = 2;
  std::vector<int32_t> seg = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  AttentionMask mask{seg.data(), nullptr};
  auto qkv = random_vector(T * 3 * C, 7);
  std::vector<float> a(T * C), b(T * C), lse(H * T);
  attention_forward(a.data(), lse.data(), qkv.data(), mask, {B, T, C, H});
  for (int c = 0; c < 3 * C; ++c) qkv[2 * 3 * C + c] += 1.0f;
  attention_forward(b.data(), lse.data(), qkv.data(), mask, {B, T, C, H});
  for (int i = 4 * C; i < T * C; ++i) EXPECT_EQ(a[i], b[i]);
  bool changed = false;
  for (int i = 2 * C; i < 4 * C; ++i) changed |= a[i] != b[i];
  EXPECT_TRUE(changed);
}

}  // namespace trainer::nn

#include "nn/ops/vec_math.h"

namespace trainer::nn {

TEST(VecMath, ExpIsAccurateAndExactAtTheEdges) {
  for (float x = -87.0f; x < 88.0f; x += 0.37f) {
    float want = std::exp(x);
    EXPECT_NEAR(vec_exp(x), want, 3e-7f * want) << x;
  }
  EXPECT_EQ(vec_exp(-INFINITY), 0.0f);
  EXPECT_EQ(vec_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(vec_exp(1000.0f)));
}

}  // namespace trainer::nn
