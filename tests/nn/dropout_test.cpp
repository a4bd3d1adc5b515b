// The dropout op and its masks (Note [Dropout masks]): the statistics a mask must have, slices
// that draw the whole tensor's bits, and the dtypes it converts between.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/op_env.h"
#include "common/temp_dir.h"
#include "nn/hf_config.h"
#include "nn/ops/dropout.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::nn {

using trainer::testing::OpEnv;
using trainer::testing::view;

// A mask's kept share and the mean it leaves: over n = 2^20 ones, each output is 1 / (1 - p)
// with probability 1 - p, else 0, so the mean is 1 with standard deviation sqrt(p / ((1 - p) n))
// (3.3e-4 at p = 0.1, 1e-3 at p = 0.5) and the kept share 1 - p with sqrt(p (1 - p) / n) (2.9e-4
// at 0.1, 4.9e-4 at 0.5). Bounds of 6 standard deviations fail a correct mask once in ~5e8
// draws; a wrong threshold or scale (p off by 1/256, a scale of 1) misses by over 10.
TEST(Dropout, KeepsOneMinusPAndPreservesTheMean) {
  OpEnv env;
  const int64_t n = int64_t(1) << 20;
  for (const float p : {0.1f, 0.5f}) {
    std::vector<float> x(size_t(n), 1.0f), y(size_t(n), -1.0f);
    dropout(env.ctx, view(y, {n}), view(x, {n}), {p, 12345, 0});
    double sum = 0;
    int64_t kept = 0;
    for (float v : y) {
      sum += v;
      kept += v != 0;
      ASSERT_TRUE(v == 0 || v == dropout_scale(p)) << v;
    }
    const double sd_mean = std::sqrt(p / ((1 - p) * double(n)));
    const double sd_kept = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(sum / double(n), 1.0, 6 * sd_mean) << "p " << p;
    EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 6 * sd_kept) << "p " << p;
  }
}

// Each element's fate is a function of (key, counter) alone: a slice given its first counter
// draws the whole tensor's bits (sequence parallelism's token slices), in place or not; another
// key draws another mask; p = 0 keeps everything as it is.
TEST(Dropout, SlicesDrawTheWholeTensorsMask) {
  OpEnv env;
  const int64_t n = 1031;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = 1.0f + float(i % 7);
  std::vector<float> whole(static_cast<size_t>(n));
  dropout(env.ctx, view(whole, {n}), view(x, {n}), {0.3f, 77, 5});
  for (const int64_t cut : {int64_t(1), int64_t(3), int64_t(512), int64_t(517)}) {
    std::vector<float> part(x.begin() + cut, x.end());
    dropout(env.ctx, view(part, {n - cut}), view(part, {n - cut}), {0.3f, 77, 5 + cut});
    for (int64_t i = cut; i < n; ++i) ASSERT_EQ(part[size_t(i - cut)], whole[size_t(i)]) << i;
  }
  std::vector<float> other(static_cast<size_t>(n));
  dropout(env.ctx, view(other, {n}), view(x, {n}), {0.3f, 78, 5});
  EXPECT_NE(other, whole);
  std::vector<float> none(static_cast<size_t>(n));
  dropout(env.ctx, view(none, {n}), view(x, {n}), {0.0f, 77, 5});
  EXPECT_EQ(none, x);
}

// A column slice of a wider matrix (a row-parallel product's input under tensor parallelism)
// passes the whole row width as row_stride and draws the whole matrix's bits of its columns, at
// any column offset and width (odd ones cross Philox blocks differently on every row).
TEST(Dropout, ColumnSlicesDrawTheWholeMatrixsMask) {
  OpEnv env;
  const int64_t rows = 37, cols = 103;
  std::vector<float> x(size_t(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + float(i % 5);
  std::vector<float> whole(x.size());
  dropout(env.ctx, view(whole, {rows, cols}), view(x, {rows, cols}), {0.4f, 21, 6});
  for (const auto [c0, w] : {std::pair<int64_t, int64_t>{0, 51}, {51, 52}, {1, 7}, {98, 5}}) {
    std::vector<float> part(size_t(rows * w)), got(part.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < w; ++j) part[size_t(i * w + j)] = x[size_t(i * cols + c0 + j)];
    dropout(env.ctx, view(got, {rows, w}), view(part, {rows, w}), {0.4f, 21, 6 + c0, cols});
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < w; ++j)
        ASSERT_EQ(got[size_t(i * w + j)], whole[size_t(i * cols + c0 + j)])
            << "columns " << c0 << "+" << w << ", element " << i << "," << j;
  }
}

// With `accumulate` the masked input is added to what the output holds (a gradient's sum), in
// the output's dtype. The kernel may fuse the scaling and the addition (one rounding) or not
// (two), so fp32 is held to 2 ulp of the exact sum and bf16 to one bf16 ulp of it (2^-8
// relative: its own rounding, half of that, plus the fp32 ones).
TEST(Dropout, AccumulatesIntoTheOutput) {
  OpEnv env;
  const int64_t rows = 9, cols = 13;
  std::vector<float> x(size_t(rows * cols)), masked(x.size()), base(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.5f * float(i % 11) - 2.0f;
    base[i] = 0.125f * float(i % 3) + 1.0f;
  }
  for (const int64_t stride : {int64_t(0), int64_t(40)}) {
    const DropoutMask mask{0.3f, 5, 2, stride};
    dropout(env.ctx, view(masked, {rows, cols}), view(x, {rows, cols}), mask);
    std::vector<float> sum = base;
    dropout(env.ctx, view(sum, {rows, cols}), view(x, {rows, cols}), mask, true);
    std::vector<bf16> sum16(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum16[i] = to_bf16(base[i]);
    dropout(env.ctx, view(sum16, {rows, cols}), view(x, {rows, cols}), mask, true);
    int dropped = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = double(base[i]) + double(masked[i]);
      dropped += masked[i] == 0;
      ASSERT_NEAR(sum[i], want, 2 * std::ldexp(std::abs(want), -23)) << i;
      const double want16 = double(to_float(to_bf16(base[i]))) + double(masked[i]);
      ASSERT_NEAR(to_float(sum16[i]), want16, std::ldexp(std::abs(want16), -8)) << i;
    }
    EXPECT_GT(dropped, 0);  // the mask shows in the sums
  }
}

// A dropped NaN or infinity stays one (the mask multiplies), so the non-finite guard sees it.
TEST(Dropout, KeepsNonFiniteValuesWhereItDrops) {
  OpEnv env;
  const int64_t n = 64;
  std::vector<float> x(static_cast<size_t>(n), std::nanf("")), y(static_cast<size_t>(n));
  x[3] = INFINITY;
  dropout(env.ctx, view(y, {n}), view(x, {n}), {0.5f, 1, 0});
  for (int64_t i = 0; i < n; ++i) EXPECT_FALSE(std::isfinite(y[size_t(i)])) << i;
}

// fp32 into bf16 (a bf16 model's branch gradient) rounds the fp32 result once.
TEST(Dropout, ConvertsBetweenDtypes) {
  OpEnv env;
  const int64_t n = 300;
  std::vector<float> x(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = 0.37f * float(i) - 20.0f;
  dropout(env.ctx, view(want, {n}), view(x, {n}), {0.25f, 9, 0});
  std::vector<bf16> got(static_cast<size_t>(n));
  dropout(env.ctx, view(got, {n}), view(x, {n}), {0.25f, 9, 0});
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(to_float(got[size_t(i)]), to_float(to_bf16(want[size_t(i)]))) << i;
}

// The threshold is round(p 2^32): 0 keeps every element, and the top of the range drops all
// but a 2^-32 sliver.
TEST(Dropout, ThresholdIsPTimesTwoToThe32) {
  EXPECT_EQ(dropout_threshold(0.0f), 0u);
  EXPECT_EQ(dropout_threshold(0.5f), 0x80000000u);
  EXPECT_EQ(dropout_threshold(0.25f), 0x40000000u);
  EXPECT_EQ(dropout_threshold(std::nextafter(1.0f, 0.0f)), 0xFFFFFF00u);
}

// A Hugging Face config.json's rates land on their sites (Architecture::hf_dropouts): GPT-2's
// three (0.1 each where absent, as GPT2Config's defaults), Llama's attention_dropout, and
// GPT-NeoX's hidden_dropout on both the embeddings and the branches; a rate of 1 is refused.
TEST(Dropout, HuggingFaceRatesLandOnTheirSites) {
  trainer::testing::TempDir dir("hf_dropout");
  auto rates = [&](const std::string& json) {
    write_file_atomic(dir.path / "config.json", json);
    return hf_model_config(dir.path / "config.json").dropout;
  };
  const DropoutRates gpt2 = rates(
      R"({"model_type": "gpt2", "vocab_size": 64, "n_positions": 16, "n_embd": 8,
          "n_layer": 1, "n_head": 2, "attn_pdrop": 0.2})");
  EXPECT_EQ(gpt2.embedding, 0.1f);
  EXPECT_EQ(gpt2.attention, 0.2f);
  EXPECT_EQ(gpt2.residual, 0.1f);
  const DropoutRates llama = rates(
      R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
          "num_hidden_layers": 1, "num_attention_heads": 2, "attention_dropout": 0.3})");
  EXPECT_EQ(llama.embedding, 0.0f);
  EXPECT_EQ(llama.attention, 0.3f);
  EXPECT_EQ(llama.residual, 0.0f);
  const DropoutRates neox = rates(
      R"({"model_type": "gpt_neox", "vocab_size": 64, "hidden_size": 16,
          "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
          "hidden_dropout": 0.25})");
  EXPECT_EQ(neox.embedding, 0.25f);
  EXPECT_EQ(neox.attention, 0.0f);
  EXPECT_EQ(neox.residual, 0.25f);
  EXPECT_THROW(rates(R"({"model_type": "gpt2", "n_embd": 8, "n_head": 2, "resid_pdrop": 1.0})"),
               UsageError);
}

}  // namespace trainer::nn
