// Multi-rank tests, run by CTest under mpirun -np 2 and -np 4: the collectives, DDP against one
// process on the whole batch (with accumulation and frozen ranges), Join on uneven inputs, and
// the start-up consistency check. Each rank computes the single-process reference itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "common/arch_family.h"
#include "dist/clock_sync.h"
#include "dist/communicator.h"
#include "dist/consistency.h"
#include "dist/ddp.h"
#include "dist/grid_shape.h"
#include "dist/hosts.h"
#include "dist/join.h"
#include "dist/step_stats.h"
#include "dist_test_util.h"
#include "nn/adamw.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::dist {

Communicator* g_comm = nullptr;
Communicator& testing::world() {
  return *g_comm;
}

namespace {

using testing::concat;
using testing::make_rows;
using testing::Rows;

constexpr int T = 16;
constexpr float kLr = 1e-3f;
constexpr float kMaxNorm = 1.0f;

// Note [Comparing after AdamW]
// One process on the whole batch runs other GEMM shapes than the ranks' micro-batches, so each
// weight gradient, a sum over K = 32..256 tokens, is added in another order (oneDNN's blocking,
// which also differs between AVX2, AVX-512 and AMX machines): ~sqrt(K) 2^-24 of its terms.
// AdamW divides each gradient by its own running rms, so an element whose gradient cancels to
// 1e-3 of its terms takes updates ~1e-3 lr apart: after 5-20 steps at lr 1e-3 the worst
// element was 1.0e-5 of the largest parameter (a norm gain, ~1) on an AVX2 machine (Join, 2
// ranks). kAdamWTolerance leaves 10x over that; a real bug (a micro-batch dropped or counted
// twice, a wrong sign or divisor on one rank) moves updates by O(lr) a step, >= 1e-3 here.
// (An element whose first gradient is within rounding of zero takes a first update of the
// other sign, 2 lr apart: rare at ~3e4 elements, and no bound below 2e-3 would absorb it.)
// The gradient of the attention key bias is zero in exact arithmetic (softmax ignores a shift
// shared by a row's scores), so in fp32 it is rounding noise, which AdamW normalises into
// updates of +-lr whose sign depends on summation order. Those elements are compared with an
// absolute bound of the updates they could take; every other element relatively.
constexpr double kAdamWTolerance = 1e-4;

double params_diff(nn::Transformer& a, nn::Transformer& b) {
  std::vector<float> x = testing::host_params(a), y = testing::host_params(b);
  const int C = a.config().n_embd;
  for (int l = 0; l < a.config().n_layer; ++l) {
    if (!a.layout().has(a.layout().block_unit(l), nn::Role::qkv_b)) continue;  // no biases
    const int64_t kb = a.layout().get(a.layout().block_unit(l), nn::Role::qkv_b).offset + C;
    for (int64_t k = kb; k < kb + C; ++k) {
      EXPECT_LE(std::fabs(x[size_t(k)] - y[size_t(k)]), 2 * 20 * kLr) << "key bias " << k;
      x[size_t(k)] = y[size_t(k)];
    }
  }
  return testing::max_relative_diff(x.data(), y.data(), int64_t(x.size()));
}

// Clipping by the global norm and one AdamW step, as the training loop does it.
void optimizer_step(nn::Model& model, nn::AdamW& opt) {
  const nn::StepScalars s = model.read_step_scalars(model.grads());
  const float scale = nn::clip_scale(std::sqrt(s.grad_norm_sq), kMaxNorm);
  opt.step(model.context(), model.params(), model.grads(), model.working_copy(), kLr, scale);
}

// The single-process reference: one step on the union of `parts`.
void reference_step(nn::Model& ref, nn::AdamW& opt, const std::vector<Rows>& parts) {
  Rows all = concat(parts);
  ref.zero_grads();
  ref.forward(all.view());
  ref.backward(1.0f / float(all.loss_tokens()));
  optimizer_step(ref, opt);
}

TEST(Collectives, SumGatherScatterBroadcast) {
  Communicator& c = *g_comm;
  const int N = c.size(), R = c.rank();
  std::vector<float> f = {float(R), 1.0f, float(R * R)};
  c.all_reduce(f.data(), 3);
  EXPECT_EQ(f[0], float(N * (N - 1) / 2));
  EXPECT_EQ(f[1], float(N));
  std::vector<double> d = {0.5 * R};
  c.all_reduce(d);
  EXPECT_DOUBLE_EQ(d[0], 0.25 * N * (N - 1));
  std::vector<int64_t> i = {int64_t(1) << 40, R};
  c.all_reduce(i);
  EXPECT_EQ(i[0], (int64_t(1) << 40) * N);

  // reduce_scatter: rank r gets sum over ranks of send[r*2, r*2+2).
  std::vector<float> send(size_t(2 * N)), recv(2);
  for (int k = 0; k < 2 * N; ++k) send[size_t(k)] = float(k + R);
  c.reduce_scatter(send.data(), recv.data(), 2);
  EXPECT_EQ(recv[0], float(N * (2 * R) + N * (N - 1) / 2));

  std::vector<float> mine = {float(R), float(-R)}, all(size_t(2 * N));
  c.all_gather(mine.data(), all.data(), 2);
  for (int r = 0; r < N; ++r) EXPECT_EQ(all[size_t(2 * r + 1)], float(-r));

  std::vector<int64_t> b = {R == N - 1 ? 42 : 0};
  c.broadcast(b.data(), 8, N - 1);
  EXPECT_EQ(b[0], 42);
  c.barrier();
}

TEST(Collectives, Bf16SumsAddInFp32AndRoundOnce) {
  Communicator& c = *g_comm;
  const int N = c.size();
  // Small integers and halves are exact in bf16, so the sums must be too.
  std::vector<bf16> x = {to_bf16(float(c.rank() + 1)), to_bf16(3.0f), to_bf16(-1.5f)};
  c.all_reduce_async(x.data(), 3, DType::bf16).wait();
  EXPECT_EQ(to_float(x[0]), float(N * (N + 1) / 2));
  EXPECT_EQ(to_float(x[1]), 3.0f * float(N));
  EXPECT_EQ(to_float(x[2]), -1.5f * float(N));
}

// Operations complete in the order they were issued: once the last is done, every earlier one
// is; each sums its own buffer (distinct values catch a mix-up).
TEST(Collectives, ManyAsyncInFlightCompleteInOrder) {
  Communicator& c = *g_comm;
  std::vector<std::vector<float>> bufs;
  for (int k = 0; k < 8; ++k) bufs.emplace_back(1000, float(k + 1));
  std::vector<Work> works;
  for (auto& b : bufs) works.push_back(c.all_reduce_async(b.data(), 1000, DType::f32));
  works.back().wait();
  for (size_t k = 0; k + 1 < works.size(); ++k)
    EXPECT_TRUE(works[k].done()) << "operation " << k << " was still running after a later one";
  for (Work& w : works) w.wait();
  for (size_t k = 0; k < bufs.size(); ++k)
    for (float v : bufs[k]) ASSERT_EQ(v, float(k + 1) * float(c.size())) << "buffer " << k;
}

// DDP on N ranks equals one process on the N-times batch: 20 AdamW steps, with clipping, two
// accumulation micro-batches (no_sync on the first), and uneven token counts across ranks; for
// every architecture.
class Ddp : public ::testing::TestWithParam<std::string> {};

TEST_P(Ddp, MatchesOneProcessOnTheWholeBatch) {
  Communicator& c = *g_comm;
  const int N = c.size(), R = c.rank(), B = 2, kMicro = 2, kSteps = 20;
  nn::ModelConfig config = testing::small_config();
  config.arch = GetParam();
  if (trainer::testing::llama_like(config.arch)) {
    config.n_kv_head = 1;
    config.ffn_multiple_of = 32;
  }
  if (config.arch == "neox") config.rotary_pct = 0.5;
  nn::Transformer model(config, testing::exec_for(B, T));
  nn::Transformer ref(config, testing::exec_for(N * B * kMicro, T));
  model.init_weights(7);
  ref.init_weights(7);
  const int64_t total = model.layout().total();
  if (R != 0) model.params().as<float>()[5] += 1.0f;  // the broadcast must repair this
  broadcast_parameters(c, model.params());
  // 0.02 MiB is 5242 fp32 gradients; every architecture here has 26k-28k parameters: 6 buckets.
  DDP ddp(c, model, {.bucket_mb = 0.02, .frozen = {}});
  ASSERT_GE(ddp.buckets().size(), 4u);
  nn::AdamW opt(model.layout(), {}, {{0, total, 0}}), ref_opt(ref.layout(), {}, {{0, total, 0}});
  for (int step = 0; step < kSteps; ++step) {
    std::vector<Rows> mine, everyone;
    for (int m = 0; m < kMicro; ++m) mine.push_back(make_rows(step, (R * kMicro + m) * B, B, T));
    for (int k = 0; k < N * kMicro; ++k) everyone.push_back(make_rows(step, k * B, B, T));
    int64_t tokens = 0;
    for (const Rows& r : mine) tokens += r.loss_tokens();
    const StepCounts counts = exchange_counts(c, true, tokens);
    model.zero_grads();
    for (int m = 0; m < kMicro; ++m) {
      ddp.set_sync(m == kMicro - 1);
      model.forward(mine[size_t(m)].view());
      model.backward(1.0f / float(counts.global_tokens));
    }
    ddp.finish();
    optimizer_step(model, opt);
    reference_step(ref, ref_opt, everyone);
  }
  const double diff = params_diff(model, ref);
  EXPECT_LT(diff, kAdamWTolerance) << "rank " << R;  // Note [Comparing after AdamW]
  // Every rank holds the same parameters, bit for bit.
  std::vector<float> p0 = testing::host_params(model);
  c.broadcast(p0.data(), total * 4, 0);
  EXPECT_EQ(p0, testing::host_params(model));
}

INSTANTIATE_TEST_SUITE_P(Architectures, Ddp, ::testing::ValuesIn(nn::architecture_names()),
                         [](const auto& info) { return info.param; });

// Activation checkpointing under DDP: the summed gradients are bit for bit those of keeping
// every activation, with buckets started at the same points.
TEST(DdpMore, CheckpointingGivesBitIdenticalGradients) {
  Communicator& c = *g_comm;
  const int B = 2;
  std::vector<std::vector<float>> grads;
  for (nn::Recompute r : {nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full}) {
    nn::Transformer model(testing::small_config(), testing::exec_for(B, T, r));
    model.init_weights(13);
    DDP ddp(c, model, {.bucket_mb = 0.02, .frozen = {}});
    Rows mine = make_rows(4, c.rank() * B, B, T);
    const StepCounts counts = exchange_counts(c, true, mine.loss_tokens());
    model.zero_grads();
    model.forward(mine.view());
    model.backward(1.0f / float(counts.global_tokens));
    ddp.finish();
    EXPECT_EQ(ddp.last_overlapped_buckets(), c.size() > 1 ? int(ddp.buckets().size()) : 0);
    grads.push_back(testing::host_grads(model));
  }
  EXPECT_TRUE(grads[1] == grads[0]) << "selective differs";
  EXPECT_TRUE(grads[2] == grads[0]) << "full differs";
}

// bf16 gradients, summed over ranks in bf16: one process on the whole batch (bf16 compute,
// fp32 gradients) within bf16's rounding.
TEST(DdpMore, Bf16GradientsMatchOneProcessWithinBf16Rounding) {
  Communicator& c = *g_comm;
  const int N = c.size(), B = 2;
  nn::Transformer model(testing::small_config(),
                        testing::exec_for(B, T, nn::Recompute::none, DType::bf16, DType::bf16));
  nn::Transformer ref(testing::small_config(),
                      testing::exec_for(N * B, T, nn::Recompute::none, DType::bf16));
  model.init_weights(5);
  ref.init_weights(5);
  DDP ddp(c, model, {.bucket_mb = 0.02, .frozen = {}});
  std::vector<Rows> everyone;
  for (int r = 0; r < N; ++r) everyone.push_back(make_rows(8, r * B, B, T));
  const Rows all = concat(everyone);
  const StepCounts counts = exchange_counts(c, true, everyone[size_t(c.rank())].loss_tokens());
  model.zero_grads();
  model.forward(everyone[size_t(c.rank())].view());
  model.backward(1.0f / float(counts.global_tokens));
  ddp.finish();
  ref.zero_grads();
  ref.forward(all.view());
  ref.backward(1.0f / float(all.loss_tokens()));
  const std::vector<float> got = testing::host_grads(model), want = testing::host_grads(ref);
  // The same bf16 activations (but for rare roundings the GEMMs' other shapes flip); the
  // gradients are rounded to bf16 per product and once more by the all-reduce (rms 2^-9/sqrt(3)
  // = 1.1e-3 each): ~2e-3 in norm, 10x below the bound. A rank's contribution lost or doubled
  // is 1/N of the norm or more.
  EXPECT_LT(testing::norm_relative_diff(got.data(), want.data(), int64_t(got.size())), 2e-2);
}

TEST(DdpMore, FrozenRangesAreNotCommunicated) {
  Communicator& c = *g_comm;
  nn::Transformer model(testing::small_config(), testing::exec_for(2, T));
  model.init_weights(3);
  const nn::ParamInfo* wpe = model.layout().find("wpe.weight");
  ASSERT_NE(wpe, nullptr);
  const Range frozen{wpe->offset, wpe->offset + wpe->numel};
  DDP ddp(c, model, {.bucket_mb = 0.02, .frozen = {frozen}});
  Rows rows = make_rows(99, 2 * c.rank(), 2, T);
  model.zero_grads();
  model.forward(rows.view());
  ddp.set_sync(false);  // keep the local gradients intact until they are copied below
  model.backward(1.0f);
  ddp.set_sync(true);
  const int64_t total = model.layout().total();
  std::vector<float> local = testing::host_grads(model);
  ddp.finish();
  std::vector<float> summed = local, magnitude(local.size());
  for (size_t k = 0; k < local.size(); ++k) magnitude[k] = std::fabs(local[k]);
  c.all_reduce(summed.data(), total);
  c.all_reduce(magnitude.data(), total);
  const std::vector<float> after = testing::host_grads(model);
  // MPI picks its all-reduce algorithm by message size, so DDP's buckets and this whole buffer
  // may add the N ranks in other orders: each sum is within (N - 1) 2^-24 of the sum of the
  // magnitudes, which can be many ulps of a sum that cancels. A missed rank is ~1/N of it.
  const double bound = std::ldexp(2.0 * c.size(), -24);
  for (int64_t k = 0; k < total; ++k) {
    const bool is_frozen = k >= frozen.begin && k < frozen.end;
    if (is_frozen) {
      ASSERT_FLOAT_EQ(after[size_t(k)], local[size_t(k)]) << "element " << k;
    } else {
      ASSERT_NEAR(after[size_t(k)], summed[size_t(k)], bound * magnitude[size_t(k)])
          << "element " << k;
    }
  }
}

// Uneven per-rank batch counts with join=true equal one process on the union of the batches.
TEST(Join, UnevenInputsMatchTheUnion) {
  Communicator& c = *g_comm;
  const int N = c.size(), R = c.rank(), B = 2;
  auto batches_of = [&](int r) { return 3 + 2 * (N - 1 - r); };  // rank N-1 runs out first
  nn::Transformer model(testing::small_config(), testing::exec_for(B, T));
  nn::Transformer ref(testing::small_config(), testing::exec_for(N * B, T));
  model.init_weights(5);
  ref.init_weights(5);
  const int64_t total = model.layout().total();
  DDP ddp(c, model, {.bucket_mb = 0.02, .frozen = {}});
  nn::AdamW opt(model.layout(), {}, {{0, total, 0}}), ref_opt(ref.layout(), {}, {{0, total, 0}});
  Join join(JoinMode::enabled);
  int steps = 0;
  for (int step = 0;; ++step) {
    const bool has = step < batches_of(R);
    Rows mine = has ? make_rows(step, R * B, B, T) : Rows{};
    const StepCounts counts = exchange_counts(c, has, has ? mine.loss_tokens() : 0);
    const StepAction action = join.decide(counts, has, step);
    if (action == StepAction::stop) break;
    model.zero_grads();
    if (action == StepAction::compute) {
      model.forward(mine.view());
      model.backward(1.0f / float(counts.global_tokens));
    }
    ddp.finish();
    optimizer_step(model, opt);
    std::vector<Rows> live;
    for (int r = 0; r < N; ++r)
      if (step < batches_of(r)) live.push_back(make_rows(step, r * B, B, T));
    reference_step(ref, ref_opt, live);
    ++steps;
  }
  EXPECT_EQ(steps, batches_of(0));
  if (N > 1) {
    EXPECT_EQ(join.first_out_rank(), N - 1);
    EXPECT_EQ(join.first_out_step(), 3);  // batches_of(N - 1)
  }
  EXPECT_LT(params_diff(model, ref), kAdamWTolerance);  // Note [Comparing after AdamW]
}

TEST(Join, ThrowAndFalseModesStopEveryRankAtTheFirstUnevenStep) {
  Communicator& c = *g_comm;
  if (c.size() < 2) GTEST_SKIP();
  auto has_at = [&](int step) { return step < (c.rank() == 1 ? 2 : 4); };
  Join stop_join(JoinMode::disabled);
  int stopped_at = -1;
  for (int step = 0; step < 10; ++step) {
    StepCounts counts = exchange_counts(c, has_at(step), 10);
    if (stop_join.decide(counts, has_at(step), step) == StepAction::stop) {
      stopped_at = step;
      break;
    }
  }
  EXPECT_EQ(stopped_at, 2);
  Join throw_join(JoinMode::throw_error);
  std::string error;
  for (int step = 0; step < 10 && error.empty(); ++step) {
    StepCounts counts = exchange_counts(c, has_at(step), 10);
    try {
      throw_join.decide(counts, has_at(step), step);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("uneven inputs at step 2: rank(s) 1 have no data"), std::string::npos)
      << error;
  EXPECT_EQ(kJoinModeNames.parse("throw"), JoinMode::throw_error);
  EXPECT_THROW(kJoinModeNames.parse("maybe"), Error);
}

// Note [Trace clocks]: rank r's clock runs 7r ms ahead of the others' steady clock, so rank 0's
// reading is rank r's less 7r ms; the alignment must find that offset, with its sign, within
// the bound it proves (true by construction); the bound itself is a few gather round trips,
// far below 50 ms on any machine that runs these tests at all.
TEST(ClockSync, RecoversAnInjectedOffsetWithItsSignWithinItsBound) {
  Communicator& comm = testing::world();
  const int64_t ahead = 7'000'000 * int64_t(comm.rank());
  const ClockOffset c = align_clocks(comm, 16, [&] { return trace::now_ns() + ahead; });
  EXPECT_LE(std::llabs(c.offset_ns - -ahead), c.error_ns) << "rank " << comm.rank();
  EXPECT_LT(c.error_ns, 50'000'000);
  if (comm.rank() == 0) EXPECT_EQ(c.offset_ns, 0);
  const std::vector<int64_t> epochs = comm.all_gather(std::vector<int64_t>{c.epoch_ns});
  for (int64_t e : epochs) EXPECT_EQ(e, epochs[0]);  // rank 0's reading, everywhere
}

TEST(Consistency, MismatchesAreCaughtOnEveryRankByContentAndNamed) {
  Communicator& c = *g_comm;
  const std::string config = "model:\n  n_layer: 2\n  n_head: 4\ntrain:\n  steps: 5\n";
  EXPECT_NO_THROW(check_consistency(c, {{"the resolved config", config}, {"the data", "abc"}}));
  if (c.size() < 2) GTEST_SKIP();
  const bool odd = c.rank() == 1;
  auto error_of = [&](const std::vector<ConsistencyItem>& items) {
    try {
      check_consistency(c, items);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Every rank reports the same item, ranks and first difference (with its YAML key).
  std::string e =
      error_of({{"the resolved config",
                 odd ? "model:\n  n_layer: 2\n  n_head: 8\ntrain:\n  steps: 5\n" : config},
                {"the data", "abc"}});
  EXPECT_NE(e.find("the resolved config differs between ranks: rank(s) 1 do not match rank 0, "
                   "first at 'model.n_head': rank 0 has 'n_head: 4', rank 1 has 'n_head: 8'"),
            std::string::npos)
      << e;
  // Equal sizes and counts are not enough: the content decides.
  e = error_of({{"the resolved config", config},
                {"the data", odd ? std::string("abd\0", 4) : std::string("abc\0", 4)}});
  EXPECT_NE(e.find("the data differs between ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("from byte 2"), std::string::npos) << e;
}

TEST(StepStats, NamesTheSlowestRank) {
  Communicator& c = *g_comm;
  StepTimes t;
  t.forward_s = c.rank() == c.size() - 1 ? 2.0 : 1.0;
  t.comm_busy_s = 0.5;
  t.comm_wait_s = 0.1;
  StragglerReport rep = gather_step_times(c, t);
  ASSERT_EQ(int(rep.ranks.size()), c.size());
  EXPECT_NEAR(t.hidden_fraction(), 0.8, 1e-12);  // 1 - 0.1 / 0.5 in double: a few ulp
  EXPECT_EQ(rep.slowest_rank, c.size() - 1);
  EXPECT_EQ(rep.lags, c.size() > 1);  // 1 s over a 1 s median (or 0.5 s over 1.5 s on 2 ranks)
  // Scheduler jitter is no lag: 0.3 ms over a 1 ms median passes the ratio, not the floor.
  t.forward_s = c.rank() == c.size() - 1 ? 1.3e-3 : 1e-3;
  rep = gather_step_times(c, t);
  EXPECT_FALSE(rep.lags);
}

// A rank is a straggler once it lags on `steps` steps in a row, not on one.
TEST(StepStats, WarnsOnlyAfterAStreak) {
  StragglerPolicy policy;
  policy.steps = 3;
  StragglerWatch watch({}, policy);
  auto step = [&](int rank, bool lags) {
    StragglerReport rep;
    rep.slowest_rank = rank;
    rep.slowest_s = 2.0;
    rep.median_s = 1.0;
    rep.lag = 1.0;
    rep.lags = lags;
    return watch.observe(rep);
  };
  EXPECT_FALSE(step(1, true));
  EXPECT_FALSE(step(1, true));
  EXPECT_FALSE(step(1, false));  // the streak breaks
  EXPECT_FALSE(step(1, true));
  EXPECT_FALSE(step(1, true));
  EXPECT_FALSE(step(0, true));  // another rank starts its own streak
  EXPECT_FALSE(step(0, true));
  const auto warning = step(0, true);
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("rank 0 has been behind for 3 steps in a row"), std::string::npos)
      << *warning;
  EXPECT_FALSE(step(0, true));  // once per `steps` of the same streak
  EXPECT_FALSE(step(0, true));
  EXPECT_TRUE(step(0, true));
}

// Every rank of one node behind is that node being slow, said once with its ranks; one rank of
// a node behind is still that rank.
TEST(StepStats, NamesASlowNodeAsTheNode) {
  StragglerPolicy policy;
  policy.steps = 2;
  StragglerWatch watch({"node1", "node1", "node2", "node2"}, policy);
  auto step = [&](std::vector<int> lagging) {
    StragglerReport rep;
    rep.slowest_rank = lagging.back();
    rep.slowest_s = 2.0;
    rep.median_s = 1.0;
    rep.lag = 1.0;
    rep.lags = true;
    rep.lagging = lagging;
    return watch.observe(rep);
  };
  EXPECT_FALSE(step({2, 3}));
  auto warning = step({2, 3});
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("slow node: ranks 2-3 on node2 (all of its 2) has been behind for 2 "
                          "steps"),
            std::string::npos)
      << *warning;
  EXPECT_FALSE(step({3}));  // one rank of it: a straggler of its own, a new streak
  warning = step({3});
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("straggler: rank 3 on node2 has been behind"), std::string::npos)
      << *warning;
}

TEST(Hosts, RanksAreNamedByNode) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b", "c"};
  EXPECT_EQ(rank_list({5, 0, 1, 2, 7}), "0-2, 5, 7");
  EXPECT_EQ(ranks_on_hosts({2, 3}, hosts), "ranks 2-3 on b (all of its 2)");
  EXPECT_EQ(ranks_on_hosts({1, 4}, hosts), "rank 1 on a, rank 4 on c (its only rank)");
  EXPECT_EQ(ranks_on_hosts({1}, {}), "rank 1");
  EXPECT_EQ(whole_hosts({0, 1, 2}, hosts), std::vector<std::string>{"a"});
  EXPECT_EQ(placement(hosts), "a: ranks 0-1; b: ranks 2-3; c: rank 4");
}

// A timed-out collective's error: a node whose ranks are all silent is lost; when that is every
// other node, this one may be the one cut off; a group's ranks alone never make a node lost.
TEST(Hosts, MissingRanksAreDescribedByNode) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b", "c", "c"};
  const std::vector<int> all = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(describe_missing({2, 3}, {}, hosts, 0, all),
            "ranks 2-3 on b (all of its 2) do not answer: b is lost or cut off from the others");
  EXPECT_EQ(describe_missing({2, 3, 4, 5}, {}, hosts, 0, all),
            "ranks 2-3 on b (all of its 2), ranks 4-5 on c (all of its 2) do not answer: no other "
            "node answers: a is cut off from the network, or they are all lost");
  EXPECT_EQ(describe_missing({3}, {5}, hosts, 0, all),
            "rank 3 on b does not answer; rank 5 on c answers but did not arrive (late, or "
            "issuing collectives in another order)");
  EXPECT_EQ(describe_missing({2}, {}, hosts, 0, {0, 2, 4}), "rank 2 on b does not answer");
  EXPECT_EQ(describe_missing({1}, {}, {}, 0, {0, 1}), "rank 1 does not answer");
  EXPECT_EQ(describe_missing({}, {}, hosts, 0, all),
            "every rank arrived and answers; the operation itself stalled in MPI");
}

// Where each rank sits (Note [Parallel grid]): the formula and its inverse agree on every rank,
// and messages name a rank's place by the dimensions over 1.
TEST(GridShapes, PlacesAndRolesFollowTheRankFormula) {
  const GridShape g{2, 3, 2};
  for (int r = 0; r < g.world(); ++r) EXPECT_EQ(g.rank(g.place(r)), r);
  const GridPlace p = g.place(9);  // (data 1 x 3 stages + stage 1) x 2 tensor + tensor rank 1
  EXPECT_EQ(p.tensor_rank, 1);
  EXPECT_EQ(p.stage, 1);
  EXPECT_EQ(p.data_rank, 1);
  EXPECT_EQ(g.role(9), "pipeline stage 1, tensor rank 1, data rank 1");
  EXPECT_EQ((GridShape{1, 2, 1}).role(1), "pipeline stage 1");
  EXPECT_EQ((GridShape{1, 1, 4}).role(3), "");  // data ranks alone: the rank says it all
}

TEST(Hosts, MissingRanksSayTheirRoles) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  const GridShape g{2, 2, 1};
  std::vector<std::string> roles;
  for (int r = 0; r < g.world(); ++r) roles.push_back(g.role(r));
  EXPECT_EQ(describe_missing({1}, {}, hosts, 0, {0, 1, 2, 3}, roles),
            "rank 1 (pipeline stage 0, tensor rank 1) on a does not answer");
  EXPECT_EQ(ranks_on_hosts({2, 3}, hosts, roles),
            "ranks 2-3 (2: pipeline stage 1, tensor rank 0; 3: pipeline stage 1, tensor rank 1) "
            "on b (all of its 2)");
  const GridShape stages{1, 2, 2};
  roles.clear();
  for (int r = 0; r < stages.world(); ++r) roles.push_back(stages.role(r));
  EXPECT_EQ(ranks_on_hosts({1}, {}, roles), "rank 1 (pipeline stage 1, data rank 0)");
  EXPECT_EQ(rank_name(1, hosts, roles), "rank 1 (pipeline stage 1, data rank 0) on a");
  EXPECT_EQ(rank_name(3, hosts, {}), "rank 3 on b");
}

}  // namespace
}  // namespace trainer::dist

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace trainer::dist;
  const LaunchInfo launch = discover_launch();
  trainer::log::configure(launch.rank, launch.world_size);
  CommOptions options;
  // Ranks start together under mpirun and do the same work between collectives (each computes
  // the references itself): steps of models of at most 4 blocks of 32 channels, milliseconds
  // even at 4 ranks on 2 cores. 60 s ends a hang sooner than the default 300, not a healthy wait.
  options.timeout_s = 60;
  std::unique_ptr<Communicator> comm = make_communicator(launch, options);
  g_comm = comm.get();
  if (comm->rank() != 0) {  // one rank's report is enough; failures are summed below
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  std::vector<int64_t> failed = {rc != 0 ? 1 : 0};
  comm->all_reduce(failed);
  if (comm->rank() == 0 && failed[0] > 0)
    fmt::print(stderr, "{} rank(s) failed (see their output above)\n", failed[0]);
  comm.reset();
  return failed[0] > 0 ? 1 : 0;
}
