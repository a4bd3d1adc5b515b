// Every op's backward against finite differences of its forward (CPU, fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "common/op_env.h"
#include "grad_check.h"
#include "nn/ops/attention.h"
#include "nn/ops/cpu/vec_math.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/rope.h"
#include "nn/ops/swiglu.h"

namespace trainer::nn {

using testing::expect_gradient;
using testing::random_vector;
using testing::weighted_sum;
using trainer::testing::OpEnv;
using trainer::testing::view;

TEST(OpsGrad, LayerNorm) {
  OpEnv env;
  const int N = 5, C = 24;
  auto x = random_vector(N * C, 1), w = random_vector(C, 2), b = random_vector(C, 3);
  auto r = random_vector(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(env.ctx, view(out, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}),
                      view(w, {C}), view(b, {C}), 1e-5f);
    return weighted_sum(out.data(), r);
  };
  loss();
  std::vector<float> dx(N * C, 0), dw(C, 0), db(C, 0);
  layernorm_backward(env.ctx, view(dx, {N, C}), view(dw, {C}), view(db, {C}), view(r, {N, C}),
                     view(x, {N, C}), view(w, {C}), view(mean, {N}), view(rstd, {N}));
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
}

TEST(OpsGrad, Linear) {
  OpEnv env;
  const int N = 6, I = 10, O = 7;
  auto x = random_vector(N * I, 1), w = random_vector(I * O, 2), b = random_vector(O, 3);
  auto r = random_vector(N * O, 4);
  std::vector<float> out(N * O);
  auto loss = [&] {
    linear_forward(env.ctx, view(out, {N, O}), view(x, {N, I}), view(w, {I, O}), view(b, {O}));
    return weighted_sum(out.data(), r);
  };
  std::vector<float> dx(N * I), dw(I * O, 0), db(O, 0);
  linear_backward(env.ctx, view(dx, {N, I}), view(dw, {I, O}), view(db, {O}), view(r, {N, O}),
                  view(x, {N, I}), view(w, {I, O}));
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
}

TEST(OpsGrad, RmsNorm) {
  OpEnv env;
  const int N = 5, C = 24;
  auto x = random_vector(N * C, 1), w = random_vector(C, 2), r = random_vector(N * C, 4);
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(env.ctx, view(out, {N, C}), view(rstd, {N}), view(x, {N, C}), view(w, {C}),
                    1e-5f);
    return weighted_sum(out.data(), r);
  };
  loss();
  std::vector<float> dx(N * C, 0), dw(C, 0);
  rmsnorm_backward(env.ctx, view(dx, {N, C}), view(dw, {C}), view(r, {N, C}), view(x, {N, C}),
                   view(w, {C}), view(rstd, {N}));
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
}

// The norms' epsilon is the caller's (model.norm_eps): with eps = 0.5, against the formulas
// computed here in double, to 1e-6 relative (fp32 rounding of sums over 24 channels). The
// outputs with 1e-5 differ from these by about a third, so an epsilon left out or fixed fails.
TEST(OpsGrad, NormsTakeTheirEpsilon) {
  OpEnv env;
  const int N = 3, C = 24;
  const float eps = 0.5f;
  auto x = random_vector(N * C, 1), w = random_vector(C, 2), b = random_vector(C, 3);
  std::vector<float> rms(N * C), ln(N * C), mean(N), rstd(N);
  rmsnorm_forward(env.ctx, view(rms, {N, C}), view(rstd, {N}), view(x, {N, C}), view(w, {C}), eps);
  layernorm_forward(env.ctx, view(ln, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}),
                    view(w, {C}), view(b, {C}), eps);
  for (int n = 0; n < N; ++n) {
    double ss = 0, s = 0, v = 0;
    for (int c = 0; c < C; ++c) ss += double(x[n * C + c]) * x[n * C + c], s += x[n * C + c];
    const double m = s / C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    for (int c = 0; c < C; ++c) {
      const double want_rms = x[n * C + c] / std::sqrt(ss / C + eps) * w[c];
      const double want_ln = (x[n * C + c] - m) / std::sqrt(v / C + eps) * w[c] + b[c];
      EXPECT_NEAR(rms[n * C + c], want_rms, 1e-6 * (1 + std::abs(want_rms))) << n << "," << c;
      EXPECT_NEAR(ln[n * C + c], want_ln, 1e-6 * (1 + std::abs(want_ln))) << n << "," << c;
    }
  }
}

// The (out, in) weight layout torch.nn.Linear (and Llama) uses.
TEST(OpsGrad, LinearOutIn) {
  OpEnv env;
  const int N = 6, I = 10, O = 7;
  auto x = random_vector(N * I, 1), w = random_vector(O * I, 2), r = random_vector(N * O, 4);
  std::vector<float> out(N * O);
  auto loss = [&] {
    linear_forward(env.ctx, view(out, {N, O}), view(x, {N, I}), view(w, {O, I}), {},
                   WeightLayout::out_in);
    return weighted_sum(out.data(), r);
  };
  std::vector<float> dx(N * I), dw(O * I, 0);
  linear_backward(env.ctx, view(dx, {N, I}), view(dw, {O, I}), {}, view(r, {N, O}), view(x, {N, I}),
                  view(w, {O, I}), WeightLayout::out_in);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
}

// Rotary embeddings on a strided view (the query columns of a packed tensor), positions
// restarting mid-batch as in a packed row; over whole heads (Llama) and over the first 4
// channels of each head of 8 (GPT-NeoX's partial rotary), whose other channels pass unchanged.
void check_rope(int rotary_dims, const Rope& rope = {100.0f}) {
  OpEnv env;
  const int N = 7, hs = 8, H = 2, width = 3 * H * hs;
  std::vector<int32_t> pos = {0, 1, 2, 3, 0, 1, 2};
  auto x = random_vector(N * width, 1), r = random_vector(N * width, 2);
  std::vector<float> y;
  auto loss = [&] {
    y = x;
    rope_forward(env.ctx, view(y, {N, width}).col_range(0, H * hs), view(pos, {N}), hs, rotary_dims,
                 rope);
    return weighted_sum(y.data(), r);
  };
  loss();
  int changed = 0;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < width; ++c) {
      const size_t i = size_t(n) * width + size_t(c);
      if (c >= H * hs || c % hs >= rotary_dims)
        EXPECT_EQ(y[i], x[i]) << "channel " << c << " of row " << n << " is not rotated";
      else
        changed += y[i] != x[i];
    }
  // Rows 0 and 4 (position 0) keep their values; the other 5 of the 7 turn by >= 0.03 rad (the
  // slowest pair at position 1), so 5/7 of the rotated channels change against a bound of 3.5/7.
  EXPECT_GT(changed, N * H * rotary_dims / 2);
  std::vector<float> dx = r;
  rope_backward(env.ctx, view(dx, {N, width}).col_range(0, H * hs), view(pos, {N}), hs, rotary_dims,
                rope);
  expect_gradient("dx", x, dx, loss);
}

TEST(OpsGrad, Rope) {
  check_rope(8);
}

TEST(OpsGrad, RopePartial) {
  check_rope(4);
}

TEST(OpsGrad, RopeScaled) {
  check_rope(8, {100.0f, RopeScaling::linear, 4.0f});
  check_rope(8, {100.0f, RopeScaling::llama3, 8.0f, 1.0f, 4.0f, 64.0f});
  Rope yarn{100.0f, RopeScaling::yarn, 4.0f};
  yarn.ramp_low = 0.5f;  // pair 0 kept, 1 and 2 ramped by a quarter and by 3/4, 3 scaled
  yarn.ramp_span = 2.0f;
  yarn.attention_factor = 1.25f;  // the rotated channels scaled, the rest left as they are
  check_rope(8, yarn);
  check_rope(4, yarn);
}

// Hugging Face's scalings, worked by hand for theta 10^4 and rd = 6: pairs of wavelength
// 2 pi / theta^(-2i/6) = 6.28, 135.4 and 2916.4. llama3 with factor 8, low 1, high 4 and an
// original context of 300 keeps wavelengths under 300 / 4 = 75 (pair 0), divides those over
// 300 / 1 (pair 2: 0.0021544 / 8), and mixes pair 1 by smooth = (300 / 135.37 - 1) / 3 =
// 0.40540: 0.59460 x 0.046416 / 8 + 0.40540 x 0.046416 = 0.022267. linear divides each by 8.
// yarn with factor 8 and the same original context: a pair turning t times over 300 positions
// is 6 ln(300 / (2 pi t)) / (2 ln 10^4), 0.13034 for t = 32 and 1.25921 for t = 1, rounded out
// to a ramp over pairs 0 to 2 (unrounded: from 0.13034 over 1.12886). Pair 0 is kept, pair 1
// mixed half and half, 0.5 x 0.046416 / 8 + 0.5 x 0.046416 = 0.026109, pair 2 divided by 8.
TEST(OpsGrad, RopeInverseFrequencies) {
  const Rope none{10000.0f}, linear{10000.0f, RopeScaling::linear, 8.0f},
      llama3{10000.0f, RopeScaling::llama3, 8.0f, 1.0f, 4.0f, 300.0f};
  Rope yarn{10000.0f, RopeScaling::yarn, 8.0f};
  std::tie(yarn.ramp_low, yarn.ramp_span) = yarn_ramp(1e4, 300, 6, 32, 1, true);
  EXPECT_EQ(yarn.ramp_low, 0.0f);
  EXPECT_EQ(yarn.ramp_span, 2.0f);
  const auto [low, span] = yarn_ramp(1e4, 300, 6, 32, 1, false);
  EXPECT_NEAR(low, 0.13034356, 1e-6);
  EXPECT_NEAR(span, 1.12886248, 1e-6);
  const double plain[] = {1.0, 0.0464158883, 0.0021544347};
  const double scaled[] = {1.0, 0.0222668000, 0.0002693043};
  const double yarned[] = {1.0, 0.0261089372, 0.0002693043};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(rope_inv_freq(none, i, 6), plain[i], 1e-6 * plain[i]) << i;
    EXPECT_NEAR(rope_inv_freq(linear, i, 6), plain[i] / 8, 1e-6 * plain[i]) << i;
    EXPECT_NEAR(rope_inv_freq(llama3, i, 6), scaled[i], 1e-6 * scaled[i]) << i;
    EXPECT_NEAR(rope_inv_freq(yarn, i, 6), yarned[i], 1e-6 * yarned[i]) << i;
  }
}

TEST(OpsGrad, SwiGlu) {
  OpEnv env;
  const int N = 4, F = 9;
  auto gu = random_vector(N * 2 * F, 1, 2.0f), r = random_vector(N * F, 2);
  std::vector<float> out(N * F), dgu(N * 2 * F);
  auto loss = [&] {
    swiglu_forward(env.ctx, view(out, {N, F}), view(gu, {N, 2 * F}));
    return weighted_sum(out.data(), r);
  };
  swiglu_backward(env.ctx, view(dgu, {N, 2 * F}), view(r, {N, F}), view(gu, {N, 2 * F}));
  expect_gradient("dgate_up", gu, dgu, loss);
}

TEST(OpsGrad, Gelu) {
  OpEnv env;
  const int n = 200;
  auto x = random_vector(n, 1, 2.0f), r = random_vector(n, 2);
  for (const GeluForm form : {GeluForm::tanh, GeluForm::erf}) {
    std::vector<float> out(n), dx(n);
    auto loss = [&] {
      gelu_forward(env.ctx, view(out, {n}), view(x, {n}), form);
      return weighted_sum(out.data(), r);
    };
    gelu_backward(env.ctx, view(dx, {n}), view(r, {n}), view(x, {n}), form);
    expect_gradient("dx", x, dx, loss, 200);
  }
}

// The values against their definitions in double precision: x Phi(x) exactly, and GPT-2's
// tanh form. The forms differ by up to 5e-4 near |x| = 2, far above fp32 rounding, so a
// kernel of the wrong form fails here.
TEST(OpsGrad, GeluValues) {
  OpEnv env;
  const int n = 200;
  auto x = random_vector(n, 1, 3.0f);
  std::vector<float> out(n);
  gelu_forward(env.ctx, view(out, {n}), view(x, {n}), GeluForm::erf);
  for (int i = 0; i < n; ++i)
    EXPECT_NEAR(out[i], 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0))), 2e-6) << x[i];
  gelu_forward(env.ctx, view(out, {n}), view(x, {n}), GeluForm::tanh);
  for (int i = 0; i < n; ++i) {
    const double u = std::sqrt(2 / M_PI) * (x[i] + 0.044715 * std::pow(double(x[i]), 3));
    EXPECT_NEAR(out[i], 0.5 * x[i] * (1 + std::tanh(u)), 2e-6) << x[i];
  }
}

TEST(OpsGrad, Embedding) {
  OpEnv env;
  const int N = 7, C = 6, V = 5, P = 8;
  std::vector<int32_t> tok = {0, 3, 3, 1, 4, 0, 3}, pos = {0, 1, 2, 0, 1, 2, 3};
  auto wte = random_vector(V * C, 1), wpe = random_vector(P * C, 2), r = random_vector(N * C, 3);
  std::vector<float> out(N * C);
  auto loss = [&] {
    embedding_forward(env.ctx, view(out, {N, C}), view(tok, {N}), view(pos, {N}), view(wte, {V, C}),
                      view(wpe, {P, C}), 0);
    return weighted_sum(out.data(), r);
  };
  std::vector<float> dwte(V * C, 0), dwpe(P * C, 0);
  embedding_backward(env.ctx, view(dwte, {V, C}), view(dwpe, {P, C}), view(r, {N, C}),
                     view(tok, {N}), view(pos, {N}), 0);
  expect_gradient("dwte", wte, dwte, loss, 100);
  expect_gradient("dwpe", wpe, dwpe, loss, 100);
}

// Vocabulary-parallel: slices [0, 2) and [2, 5) of the table, each looking up only its own ids,
// add up to the whole lookup, and each slice's gradient is the whole gradient's rows (bit for
// bit: every element is the same sum of the same rows in the same order, or zero).
TEST(OpsGrad, EmbeddingVocabularySlices) {
  OpEnv env;
  const int N = 7, C = 6, V = 5, cut = 2;
  std::vector<int32_t> tok = {0, 3, 3, 1, 4, 0, 3}, pos(N, 0);
  auto wte = random_vector(V * C, 1), r = random_vector(N * C, 3);
  std::vector<float> whole(N * C), lo(N * C), hi(N * C);
  embedding_forward(env.ctx, view(whole, {N, C}), view(tok, {N}), view(pos, {N}), view(wte, {V, C}),
                    {}, 0);
  embedding_forward(env.ctx, view(lo, {N, C}), view(tok, {N}), view(pos, {N}),
                    view(wte, {V, C}).row_range(0, cut), {}, 0);
  embedding_forward(env.ctx, view(hi, {N, C}), view(tok, {N}), view(pos, {N}),
                    view(wte, {V, C}).row_range(cut, V - cut), {}, cut);
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(lo[i] + hi[i], whole[i]) << i;
  std::vector<float> dwhole(V * C, 0), dslices(V * C, 0);
  embedding_backward(env.ctx, view(dwhole, {V, C}), {}, view(r, {N, C}), view(tok, {N}),
                     view(pos, {N}), 0);
  embedding_backward(env.ctx, view(dslices, {V, C}).row_range(0, cut), {}, view(r, {N, C}),
                     view(tok, {N}), view(pos, {N}), 0);
  embedding_backward(env.ctx, view(dslices, {V, C}).row_range(cut, V - cut), {}, view(r, {N, C}),
                     view(tok, {N}), view(pos, {N}), cut);
  EXPECT_EQ(dslices, dwhole);
}

TEST(OpsGrad, CrossEntropy) {
  OpEnv env;
  const int N = 6, V = 11;
  auto logits = random_vector(N * V, 1, 2.0f);
  std::vector<int32_t> targets = {3, -1, 0, 10, 5, -1};
  std::vector<float> stats(2 * N);
  auto loss = [&] {
    std::vector<double> sum = {0};
    cross_entropy_stats(env.ctx, view(stats, {N, 2}), view(logits, {N, V}), view(targets, {N}));
    cross_entropy_loss(env.ctx, view(sum, {1}), view(logits, {N, V}), view(stats, {N, 2}),
                       view(targets, {N}), 0);
    return sum[0];
  };
  loss();
  std::vector<float> dlogits(N * V);
  std::vector<float> scale = {1.0f};
  cross_entropy_backward(env.ctx, view(dlogits, {N, V}), view(logits, {N, V}), view(stats, {N, 2}),
                         view(targets, {N}), view(scale, {1}), 0);
  expect_gradient("dlogits", logits, dlogits, loss, 66);
  for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits[1 * V + v], 0.0f);  // uncounted row
}

// The statistics of rows longer than the CPU kernel's 512-logit chunks: the maximum in a late
// chunk (the sum so far rescaled), a row whose first chunk is all -inf (masked logits), a row of
// 1500 (not a multiple of the chunk), an uncounted row left as it was, and a NaN among masked
// logits, which the statistics carry on (as non-finite, for the checks that look for it). Against
// double: the fp32 sum of 1500 exponentials is within 1500 x 2^-24 = 9e-5 of its value relative
// (each term and partial sum rounded once, the exponential within 2 ulp), so its log within 1e-4.
TEST(OpsGrad, CrossEntropyStatsOverChunks) {
  OpEnv env;
  const int N = 4, V = 1500;
  auto logits = random_vector(N * V, 3, 2.0f);
  logits[1300] = 20.0f;          // row 0's maximum: 10 standard deviations over the others
  for (int v = 0; v < 512; ++v)  // rows 1 and 3: their first chunk masked
    logits[V + v] = logits[3 * V + v] = -__builtin_inff();
  logits[3 * V + 100] = __builtin_nanf("");
  std::vector<int32_t> targets = {7, 1400, -1, 3};
  std::vector<float> stats(2 * N, 42.0f);
  cross_entropy_stats(env.ctx, view(stats, {N, 2}), view(logits, {N, V}), view(targets, {N}));
  for (int n = 0; n < 2; ++n) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(logits[n * V + v]));
    for (int v = 0; v < V; ++v) sum += std::exp(double(logits[n * V + v]) - mx);
    EXPECT_EQ(stats[2 * n], float(mx)) << n;
    EXPECT_NEAR(stats[2 * n + 1], std::log(sum), 1e-4) << n;
  }
  EXPECT_EQ(stats[0], 20.0f);
  EXPECT_EQ(stats[4], 42.0f);  // uncounted: not written
  EXPECT_EQ(stats[5], 42.0f);
  EXPECT_TRUE(std::isnan(stats[7]));
}

// Note [Vocabulary-parallel loss]: three column slices (4, 4 and 3 of 11), each with its own
// statistics, merged, then each slice's loss and gradient, against the whole row's. The merged
// offset is the log of a sum of three rescaled partial sums instead of one sum of eleven
// exponentials: fp32 rounding of a few ulps on values of order 1, so the losses (a sum of 4
// terms of order 3) agree to 1e-6 relative and the probabilities to 1e-6.
TEST(OpsGrad, CrossEntropyVocabularySlices) {
  OpEnv env;
  const int N = 6, V = 11;
  const std::array<int, 4> cuts = {0, 4, 8, 11};
  auto logits = random_vector(N * V, 1, 2.0f);
  std::vector<int32_t> targets = {3, -1, 0, 10, 5, -1};
  std::vector<float> stats(2 * N), scale = {0.5f};
  std::vector<double> whole = {0};
  cross_entropy_stats(env.ctx, view(stats, {N, 2}), view(logits, {N, V}), view(targets, {N}));
  cross_entropy_loss(env.ctx, view(whole, {1}), view(logits, {N, V}), view(stats, {N, 2}),
                     view(targets, {N}), 0);
  std::vector<float> dwhole(N * V);
  cross_entropy_backward(env.ctx, view(dwhole, {N, V}), view(logits, {N, V}), view(stats, {N, 2}),
                         view(targets, {N}), view(scale, {1}), 0);
  // Each slice as its own contiguous (N, width) matrix, as a rank holds it.
  std::vector<std::vector<float>> slice(3);
  std::vector<float> parts(3 * 2 * N), merged(2 * N);
  for (int s = 0; s < 3; ++s) {
    const int w = cuts[s + 1] - cuts[s];
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < w; ++v) slice[s].push_back(logits[n * V + cuts[s] + v]);
    cross_entropy_stats(env.ctx, view(parts, {3 * N * 2}).flat(s * 2 * N, 2 * N).reshape({N, 2}),
                        view(slice[s], {N, w}), view(targets, {N}));
  }
  cross_entropy_merge_stats(env.ctx, view(merged, {N, 2}), view(parts, {3, N, 2}),
                            view(targets, {N}));
  std::vector<double> sum = {0};
  for (int s = 0; s < 3; ++s) {
    const int w = cuts[s + 1] - cuts[s];
    cross_entropy_loss(env.ctx, view(sum, {1}), view(slice[s], {N, w}), view(merged, {N, 2}),
                       view(targets, {N}), cuts[s]);
    std::vector<float> d(N * w);
    cross_entropy_backward(env.ctx, view(d, {N, w}), view(slice[s], {N, w}), view(merged, {N, 2}),
                           view(targets, {N}), view(scale, {1}), cuts[s]);
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < w; ++v)
        EXPECT_NEAR(d[n * w + v], dwhole[n * V + cuts[s] + v], 1e-6) << n << "," << v;
  }
  EXPECT_NEAR(sum[0], whole[0], 1e-6 * whole[0]);
}

TEST(CrossEntropy, ExactForHugeFiniteLogits) {
  // Two equal huge logits: the loss is log 2, though max + log(sum) rounds to max in fp32.
  OpEnv env;
  std::vector<float> logits = {1e10f, 1e10f, -1e10f};
  std::vector<int32_t> target = {0};
  std::vector<float> stats(2);
  std::vector<double> sum = {0};
  cross_entropy_stats(env.ctx, view(stats, {1, 2}), view(logits, {1, 3}), view(target, {1}));
  cross_entropy_loss(env.ctx, view(sum, {1}), view(logits, {1, 3}), view(stats, {1, 2}),
                     view(target, {1}), 0);
  EXPECT_NEAR(sum[0], std::log(2.0), 1e-6);  // double: ~1e-16 off; the fp32 form is 0.69 off
}

// Attention under each kind of mask: causal only, packed segments, padded lengths; with as
// many key/value heads as heads, grouped (two query heads per key/value head) and multi-query;
// without dropout and with it on the probabilities (the mask fixed by its key, and the slice's
// heads counted from 3, as a tensor-parallel rank's). The backward is checked on strided views
// of a packed qkv tensor, as the model uses it.
class AttentionGrad : public ::testing::TestWithParam<std::tuple<int, int, float>> {};

TEST_P(AttentionGrad, MatchesFiniteDifferences) {
  OpEnv env;
  const auto [mask_kind, Hkv, drop] = GetParam();
  const int B = 2, T = 9, C = 16, H = 4, Ckv = Hkv * (C / H), width = C + 2 * Ckv;
  std::vector<int32_t> segments = {0, 0, 0, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  std::vector<int32_t> lengths = {9, 6};
  AttentionMask mask;
  if (mask_kind == 1) mask.segments = view(segments, {B, T});
  if (mask_kind == 2) mask.lengths = view(lengths, {B});
  mask.dropout = {drop, 4242, 3};
  auto qkv = random_vector(B * T * width, 1), r = random_vector(B * T * C, 2);
  std::vector<float> out(B * T * C), lse(B * H * T), dqkv(B * T * width);
  auto part = [&](std::vector<float>& v, int i) {
    const Tensor all = view(v, {B, T, width});
    return i == 0 ? all.col_range(0, C) : all.col_range(C + (i - 1) * Ckv, Ckv);
  };
  auto loss = [&] {
    attention_forward(env.ctx, view(out, {B, T, C}), view(lse, {B * H * T}), part(qkv, 0),
                      part(qkv, 1), part(qkv, 2), mask, H);
    return weighted_sum(out.data(), r);
  };
  loss();
  attention_backward(env.ctx, part(dqkv, 0), part(dqkv, 1), part(dqkv, 2), view(r, {B, T, C}),
                     view(out, {B, T, C}), view(lse, {B * H * T}), part(qkv, 0), part(qkv, 1),
                     part(qkv, 2), mask, H);
  expect_gradient("dqkv", qkv, dqkv, loss, 200);
}

INSTANTIATE_TEST_SUITE_P(MasksAndHeads, AttentionGrad,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(4, 2, 1),
                                            ::testing::Values(0.0f, 0.3f)));

// Dropout on the probabilities drops: the same batch's output differs from the undropped one,
// and the same key gives the same output again.
TEST(Attention, DropoutChangesTheOutputByItsKeyAlone) {
  OpEnv env;
  const int B = 1, T = 16, C = 8, H = 2;
  auto qkv = random_vector(B * T * 3 * C, 5);
  const Tensor packed = view(qkv, {B, T, 3 * C});
  auto run = [&](float p, uint64_t key) {
    std::vector<float> out(B * T * C), lse(B * H * T);
    AttentionMask mask;
    mask.dropout = {p, key, 0};
    attention_forward(env.ctx, view(out, {B, T, C}), view(lse, {B * H * T}), packed.col_range(0, C),
                      packed.col_range(C, C), packed.col_range(2 * C, C), mask, H);
    return out;
  };
  const std::vector<float> plain = run(0, 0), dropped = run(0.5f, 1);
  EXPECT_NE(plain, dropped);
  EXPECT_EQ(run(0.5f, 1), dropped);
  EXPECT_NE(run(0.5f, 2), dropped);
}

TEST(Attention, LongSequencesSpanSeveralTiles) {
  // T > the 64-query tile, against a direct softmax reference for one head.
  OpEnv env;
  const int B = 1, T = 150, C = 4, H = 1;
  auto qkv = random_vector(B * T * 3 * C, 5);
  std::vector<float> out(T * C), lse(T);
  const Tensor packed = view(qkv, {B, T, 3 * C});
  attention_forward(env.ctx, view(out, {B, T, C}), view(lse, {T}), packed.col_range(0, C),
                    packed.col_range(C, C), packed.col_range(2 * C, C), {}, H);
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
      // fp32 scores (2^-24 of |q||k|, turned by exp into relative errors of the weights), vec_exp
      // (2 ulp) and sums over up to 150 keys: ~2e-6 for |v| <= 3; a wrong tile edge is O(|v|).
      EXPECT_NEAR(out[i * C + d], o, 1e-5) << "query " << i;
    }
  }
}

TEST(Attention, NoAttentionAcrossSegments) {
  // Changing a token of document 0 must leave every output of document 1 untouched.
  OpEnv env;
  const int B = 1, T = 10, C = 4, H = 2;
  std::vector<int32_t> seg = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  AttentionMask mask{.segments = view(seg, {B, T})};
  auto qkv = random_vector(T * 3 * C, 7);
  std::vector<float> a(T * C), b(T * C), lse(H * T);
  auto run = [&](std::vector<float>& out) {
    const Tensor packed = view(qkv, {B, T, 3 * C});
    attention_forward(env.ctx, view(out, {B, T, C}), view(lse, {H * T}), packed.col_range(0, C),
                      packed.col_range(C, C), packed.col_range(2 * C, C), mask, H);
  };
  run(a);
  for (int c = 0; c < 3 * C; ++c) qkv[2 * 3 * C + c] += 1.0f;
  run(b);
  for (int i = 4 * C; i < T * C; ++i) EXPECT_EQ(a[i], b[i]);
  bool changed = false;
  for (int i = 2 * C; i < 4 * C; ++i) changed |= a[i] != b[i];
  EXPECT_TRUE(changed);
}

TEST(Attention, SegmentRunsListEachRowsDocuments) {
  // Two rows of 5: documents 0, 1 and a padding tail in row 0; one document in row 1.
  const std::vector<int32_t> seg = {0, 0, 1, -1, -1, 0, 0, 0, 0, 0};
  EXPECT_EQ(segment_runs(seg.data(), 2, 5), (std::vector<int32_t>{0, 2, 3, 5, 10}));
  // A run that starts a row is a new run even where the id continues the row before.
  const std::vector<int32_t> same = {3, 3, 3, 3};
  EXPECT_EQ(segment_runs(same.data(), 2, 2), (std::vector<int32_t>{0, 2, 4}));
  // An id in two runs of one row is not a set of runs: no runs at all.
  const std::vector<int32_t> split = {0, 1, 0, 2};
  EXPECT_TRUE(segment_runs(split.data(), 1, 4).empty());
  // The same id in two rows is fine.
  const std::vector<int32_t> rows = {0, 1, 0, 1};
  EXPECT_EQ(segment_runs(rows.data(), 2, 2), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Attention, QueriesAtAnOffsetMatchTheFullSequence) {
  // The KV-cache form: the last 3 queries at q_pos = 7 against all 10 keys equal the last 3
  // rows of the full causal attention.
  OpEnv env;
  const int T = 10, C = 8, H = 2, Tq = 3, q_pos = T - Tq;
  auto qkv = random_vector(T * 3 * C, 9);
  std::vector<float> full(T * C), lse(H * T), tail(Tq * C), lse_tail(H * Tq);
  const Tensor packed = view(qkv, {1, T, 3 * C});
  attention_forward(env.ctx, view(full, {1, T, C}), view(lse, {H * T}), packed.col_range(0, C),
                    packed.col_range(C, C), packed.col_range(2 * C, C), {}, H);
  Tensor q_tail = packed.col_range(0, C);  // (1, Tq, C) from row q_pos, stride 3C
  q_tail.data = qkv.data() + q_pos * 3 * C;
  q_tail.shape[1] = Tq;
  attention_forward(env.ctx, view(tail, {1, Tq, C}), view(lse_tail, {H * Tq}), q_tail,
                    packed.col_range(C, C), packed.col_range(2 * C, C), {}, H, q_pos);
  // sgemm of 3 query rows against 10 (oneDNN may pick another kernel, summing in another order):
  // scores off by 2^-24 |q||k|, outputs by ~sqrt(10) 2^-24 |v|: up to ~2e-6 for |v| <= 3; a
  // wrong offset (one key more or less) is O(0.1).
  for (int i = 0; i < Tq * C; ++i) EXPECT_NEAR(tail[i], full[q_pos * C + i], 1e-5) << i;
}

TEST(VecMath, ExpIsAccurateAndExactAtTheEdges) {
  for (float x = -87.0f; x < 88.0f; x += 0.37f) {
    float want = std::exp(x);
    // At most 1.1e-7 relative on this grid (1.8 x 2^-24), with or without FMA contraction.
    EXPECT_NEAR(vec_exp(x), want, 3e-7f * want) << x;
  }
  EXPECT_EQ(vec_exp(-INFINITY), 0.0f);
  EXPECT_EQ(vec_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(vec_exp(1000.0f)));
}

}  // namespace trainer::nn
