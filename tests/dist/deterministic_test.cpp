// Multi-rank tests of dist.deterministic (run with the other multi-rank tests at 1, 2 and 4
// ranks): fixed-tree collectives give the tree one process builds, the exact norm does not
// depend on how the elements are split, and every sharding stage trains to the bits of one
// process over the same global batches (Note [World-size-invariant sums]).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "dist/exact_norm.h"
#include "dist/join.h"
#include "dist/tree_sum.h"
#include "dist_test_util.h"
#include "runtime/buffer.h"
#include "runtime/rng.h"

namespace trainer::dist {
namespace {

using testing::make_rows;
using testing::Rows;
using testing::world;

// Rank r's value of element k, any dtype's worth of randomness.
double value(uint64_t seed, int r, int64_t k) {
  Rng rng(seed * 1000003 + uint64_t(r) * 7919 + uint64_t(k));
  return (double(rng.uniform()) - 0.5) * std::exp2(double(int(rng.uniform() * 20) - 10));
}

// The balanced tree over ranks [lo, hi) that pairs r with r ^ 1 first, as one process adds it.
template <typename T, typename Add>
T tree(const std::vector<T>& x, int lo, int hi, Add add) {
  if (hi - lo == 1) return x[size_t(lo)];
  const int mid = (lo + hi) / 2;
  return add(tree(x, lo, mid, add), tree(x, mid, hi, add));
}

TEST(FixedTree, AllReduceAndReduceScatterGiveTheOneProcessTree) {
  Communicator& c = world();
  const int N = c.size(), R = c.rank();
  const int64_t count = 1003;  // not a multiple of the world: uneven segments
  auto f32_add = [](float a, float b) { return a + b; };
  auto bf16_add = [](bf16 a, bf16 b) { return to_bf16(to_float(a) + to_float(b)); };
  std::vector<float> f(static_cast<size_t>(count));
  std::vector<bf16> h(static_cast<size_t>(count));
  std::vector<double> d(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    f[size_t(k)] = float(value(1, R, k));
    h[size_t(k)] = to_bf16(float(value(2, R, k)));
    d[size_t(k)] = value(3, R, k);
  }
  c.all_reduce_async(f.data(), count, DType::f32, ReduceOrder::fixed_tree).wait();
  c.all_reduce_async(h.data(), count, DType::bf16, ReduceOrder::fixed_tree).wait();
  c.all_reduce_async(d.data(), count, DType::f64, ReduceOrder::fixed_tree).wait();
  for (int64_t k = 0; k < count; ++k) {
    std::vector<float> fx;
    std::vector<bf16> hx;
    std::vector<double> dx;
    for (int r = 0; r < N; ++r) {
      fx.push_back(float(value(1, r, k)));
      hx.push_back(to_bf16(float(value(2, r, k))));
      dx.push_back(value(3, r, k));
    }
    ASSERT_EQ(f[size_t(k)], tree(fx, 0, N, f32_add)) << "f32 element " << k;
    ASSERT_EQ(to_float(h[size_t(k)]), to_float(tree(hx, 0, N, bf16_add))) << "bf16 element " << k;
    ASSERT_EQ(d[size_t(k)], tree(dx, 0, N, std::plus<double>())) << "f64 element " << k;
  }
  // Reduce-scatter: rank R gets the tree sums of segment R.
  const int64_t n = 257;
  std::vector<float> send(static_cast<size_t>(n * N)), recv(static_cast<size_t>(n));
  for (int64_t k = 0; k < n * N; ++k) send[size_t(k)] = float(value(4, R, k));
  c.reduce_scatter_async(send.data(), recv.data(), n, DType::f32, ReduceOrder::fixed_tree).wait();
  for (int64_t k = 0; k < n; ++k) {
    std::vector<float> x;
    for (int r = 0; r < N; ++r) x.push_back(float(value(4, r, R * n + k)));
    ASSERT_EQ(recv[size_t(k)], tree(x, 0, N, f32_add)) << "reduce-scatter element " << k;
  }
}

// Micro-batch sums (the ranks' trees over W consecutive items) added by TreeSum give the bits
// of TreeSum over all G items, for every power-of-two W dividing G, and for G that are not
// powers of two.
TEST(TreeSum, RanksThenMicroBatchesEqualsOneProcess) {
  const Context ctx;
  const int64_t n = 300;
  for (int G : {1, 2, 3, 4, 6, 8, 12}) {
    std::vector<std::vector<float>> items(static_cast<size_t>(G),
                                          std::vector<float>(static_cast<size_t>(n)));
    for (int i = 0; i < G; ++i)
      for (int64_t k = 0; k < n; ++k) items[size_t(i)][size_t(k)] = float(value(5, i, k));
    std::vector<float> one(static_cast<size_t>(n));
    {
      TreeSum t(ctx, n);
      for (int i = 0; i + 1 < G; ++i)
        t.add(i, make_tensor(items[size_t(i)].data(), DType::f32, {n}), 0);
      t.finish(G - 1, make_tensor(items[size_t(G - 1)].data(), DType::f32, {n}),
               make_tensor(one.data(), DType::f32, {n}), 0);
    }
    for (int W : {2, 4, 8}) {
      if (G % W != 0) continue;
      TreeSum t(ctx, n);
      std::vector<float> out(static_cast<size_t>(n));
      for (int j = 0; j < G / W; ++j) {
        std::vector<float> micro(
            static_cast<size_t>(n));  // the ranks' tree over items jW .. jW + W-1
        for (int64_t k = 0; k < n; ++k) {
          std::vector<float> x;
          for (int r = 0; r < W; ++r) x.push_back(items[size_t(j * W + r)][size_t(k)]);
          micro[size_t(k)] = tree(x, 0, W, std::plus<float>());
        }
        // In two halves, as a sharded stage adds unit by unit.
        for (int64_t off : {int64_t(0), n / 2}) {
          const int64_t len = off == 0 ? n / 2 : n - n / 2;
          const Tensor item = make_tensor(micro.data() + off, DType::f32, {len});
          if (j + 1 < G / W)
            t.add(j, item, off);
          else
            t.finish(j, item, make_tensor(out.data() + off, DType::f32, {len}), off);
        }
      }
      ASSERT_EQ(std::memcmp(out.data(), one.data(), size_t(n) * 4), 0) << "G " << G << " W " << W;
    }
  }
}

// The norm of a vector split over the ranks (unevenly) equals the one-process norm bit for
// bit, with 1 thread or 2, is accurate to fp64 rounding, and is NaN/inf when an element is.
TEST(ExactNorm, SameBitsWhateverTheSplit) {
  Communicator& c = world();
  const int N = c.size(), R = c.rank();
  const int64_t total = 100003;
  std::vector<float> all(static_cast<size_t>(total));
  long double reference = 0;
  for (int64_t k = 0; k < total; ++k) {
    all[size_t(k)] = float(value(6, 0, k));
    reference += (long double)all[size_t(k)] * all[size_t(k)];
  }
  const int64_t b = total * R / N - (R > 0 ? 17 : 0),
                e = total * (R + 1) / N - (R + 1 < N ? 17 : 0);
  const Tensor mine = make_tensor(all.data() + b, DType::f32, {e - b});
  const double split = exact_sum_squares(c, mine, true);
  const Tensor whole = make_tensor(all.data(), DType::f32, {total});
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one_thread = exact_sum_squares(c, whole, false);
  omp_set_num_threads(2);
  const double two_threads = exact_sum_squares(c, whole, false);
  omp_set_num_threads(threads);
  EXPECT_EQ(split, one_thread);
  EXPECT_EQ(one_thread, two_threads);
  // The reference adds 1e5 positive squares in long double: within 1e5 * 2^-64 = 5e-15 (x87),
  // plus the exact norm's one rounding to double (1.1e-16); the same on every x86 CPU.
  EXPECT_NEAR(split, double(reference), 1e-14 * double(reference));
  all[size_t(b)] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(std::isfinite(exact_sum_squares(c, mine, true)));
}

constexpr int T = 16, B = 2, kGlobal = 4;  // micro-batches per step over all ranks
constexpr float kLr = 1e-3f, kMaxNorm = 0.5f;

// `steps` deterministic steps on `comm`: global micro-batch i of a step goes to rank i mod W
// as its micro-batch i / W, as the data loader deals them. Returns the fp32 masters of the
// whole model, gathered.
std::vector<float> train_deterministic(Communicator& comm, ShardingStage stage,
                                       const std::string& arch, int steps) {
  nn::ModelConfig mc = testing::small_config();
  mc.n_layer = 3;
  mc.arch = arch;
  nn::ExecConfig exec = testing::exec_for(B, T);
  exec.own_params = stage == ShardingStage::none;
  nn::Transformer model(mc, exec);
  ParallelConfig pc;
  pc.sharding = stage;
  pc.bucket_mb = 0.01;
  pc.deterministic = true;
  auto dp = make_data_parallel(comm, model, pc);
  init_masters(*dp, model, 11);
  const int W = comm.size(), A = kGlobal / W;
  for (int step = 0; step < steps; ++step) {
    std::vector<Rows> rows;
    int64_t tokens = 0;
    for (int j = 0; j < A; ++j) {
      rows.push_back(make_rows(uint64_t(step * kGlobal + j * W + comm.rank()), 0, B, T));
      tokens += rows.back().loss_tokens();
    }
    const StepCounts counts = exchange_counts(comm, true, tokens, A);
    dp->begin_step(A);
    model.reset_loss();
    for (int j = 0; j < A; ++j) {
      dp->begin_micro_batch();
      model.forward(rows[size_t(j)].view());
      model.backward(1.0f / float(counts.global_tokens));
    }
    dp->finish();
    dp->step(kLr, nn::clip_scale(grad_norm(comm, *dp, model, true), kMaxNorm));
  }
  // Gather the slices into the whole flat buffer (each element held by exactly one rank).
  std::vector<float> whole(size_t(model.layout().total()), 0.0f);
  const std::vector<float> local = read_as_f32(model.context(), dp->masters());
  for (const nn::FlatSlice& s : dp->slices())
    std::copy_n(local.begin() + s.local, s.size(), whole.begin() + s.begin);
  if (stage != ShardingStage::none && comm.size() > 1)
    comm.all_reduce(whole.data(), int64_t(whole.size()));
  return whole;
}

TEST(Deterministic, EveryStageTrainsToTheBitsOfOneProcess) {
  Communicator& c = world();
  std::unique_ptr<Communicator> single = make_single_process_communicator();
  for (const std::string& arch : nn::architecture_names()) {
    const std::vector<float> ref = train_deterministic(*single, ShardingStage::none, arch, 8);
    for (const auto& [s, name] : kShardingStageNames.entries) {
      const std::vector<float> got = train_deterministic(c, s, arch, 8);
      ASSERT_EQ(got.size(), ref.size());
      int64_t differ = 0;
      for (size_t k = 0; k < got.size(); ++k) differ += std::memcmp(&got[k], &ref[k], 4) != 0;
      EXPECT_EQ(differ, 0) << name << " " << arch << " on " << c.size() << " ranks";
    }
  }
}

}  // namespace
}  // namespace trainer::dist
