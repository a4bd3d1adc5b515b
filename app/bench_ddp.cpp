// trainer_ddp_bench: trains a GPT on synthetic tokens with DDP or a sharding stage and prints
// one line of figures (throughput, phase times, exposed communication, the fraction of
// communication hidden behind compute, and the bytes of model state and of all buffers per
// rank). scripts/bench/ddp.sh runs it at 1 and 2 ranks, scripts/bench/sharding.sh every stage
// at 2 ranks, and each prints the ratios.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/consistency.h"
#include "dist/data_parallel.h"
#include "dist/join.h"
#include "dist/step_stats.h"
#include "nn/adamw.h"
#include "nn/transformer.h"
#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/timer.h"

namespace trainer::app {
namespace {

using namespace dist;

struct Args {
  nn::ModelConfig model;
  int B = 8, T = 256, steps = 4, warmup = 1, accum = 1;
  double bucket_mb = 10;
  ShardingStage sharding = ShardingStage::none;
  bool deterministic = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--layers")
      a.model.n_layer = v;
    else if (k == "--embd")
      a.model.n_embd = v;
    else if (k == "--heads")
      a.model.n_head = v;
    else if (k == "--vocab")
      a.model.vocab_size = v;
    else if (k == "--batch")
      a.B = v;
    else if (k == "--seq")
      a.T = v;
    else if (k == "--steps")
      a.steps = v;
    else if (k == "--warmup")
      a.warmup = v;
    else if (k == "--accum")
      a.accum = v;
    else if (k == "--deterministic")
      a.deterministic = v != 0;
    else if (k == "--bucket-mb")
      a.bucket_mb = std::atof(argv[i + 1]);
    else if (k == "--sharding")
      a.sharding = kShardingStageNames.parse(argv[i + 1]);
    else
      THROW_ERROR("unknown option {}", k);
  }
  a.model.max_seq_len = a.T;
  a.model.validate();
  return a;
}

void run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const LaunchInfo launch = discover_launch();
  log::configure(launch.rank, launch.world_size);
  auto comm = make_communicator(launch, {.timeout_s = 600});
  const int R = comm->rank(), N = comm->size();
  nn::ExecConfig exec;
  exec.max_rows = a.B;
  exec.max_seq_len = a.T;
  exec.own_params = a.sharding == ShardingStage::none;
  const size_t before = Buffer::live_bytes(Device::cpu);
  nn::Transformer model(a.model, exec);
  const int64_t total = model.layout().total();
  check_consistency(*comm, {{"the parameter layout", std::to_string(model.layout().digest())}});
  ParallelConfig pc;
  pc.sharding = a.sharding;
  pc.bucket_mb = a.bucket_mb;
  pc.deterministic = a.deterministic;
  auto dp = make_data_parallel(*comm, model, pc);
  init_masters(*dp, model, 1);
  const double live_mib = double(Buffer::live_bytes(Device::cpu) - before) / 1048576.0;
  std::vector<int32_t> tokens(size_t(a.B) * a.T), targets(tokens.size());
  uint64_t x = 0x12345u + uint64_t(R);
  StepTimes sum;
  double wall = 0;
  StragglerWatch stragglers(comm->hosts());
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      tokens[i] = int32_t((x >> 33) % uint64_t(a.model.vocab_size));
      targets[i] = int32_t((x >> 13) % uint64_t(a.model.vocab_size));
    }
    comm->barrier();  // every step starts together: the wall time is the global step time
    Timer step_timer, t;
    StepTimes st;
    const StepCounts counts =
        exchange_counts(*comm, true, int64_t(tokens.size()) * a.accum, a.accum);
    dp->begin_step(a.accum);
    model.reset_loss();
    for (int m = 0; m < a.accum; ++m) {  // the same tokens each time: only the time counts
      dp->begin_micro_batch();
      t.reset();
      model.forward({a.B, a.T, tokens.data(), targets.data(), nullptr, nullptr});
      st.forward_s += t.seconds();
      t.reset();
      model.backward(1.0f / float(counts.global_tokens));
      st.backward_s += t.seconds();
    }
    dp->finish();
    t.reset();
    dp->step(6e-4f, nn::clip_scale(grad_norm(*comm, *dp, model, a.deterministic), 1.0f));
    st.optimizer_s = t.seconds();
    // Under full sharding the forward's gathers wait too; all waits are exposed time.
    st.comm_wait_s = dp->last_wait_seconds();
    st.comm_busy_s = dp->last_comm_seconds();
    const double step_s = step_timer.seconds();
    const StragglerReport rep = gather_step_times(*comm, st);
    if (step < a.warmup) continue;
    if (const auto warning = stragglers.observe(rep)) log::info("step {}: {}", step, *warning);
    wall += step_s;
    sum.forward_s += st.forward_s;
    sum.backward_s += st.backward_s;
    sum.comm_wait_s += st.comm_wait_s;
    sum.comm_busy_s += st.comm_busy_s;
    sum.optimizer_s += st.optimizer_s;
  }
  const double k = a.steps;
  if (R == 0)
    fmt::print(
        "ranks={} sharding={} deterministic={} accum={} params={} bucket_mb={} step_s={:.3f} "
        "tokens_per_s={:.0f} "
        "forward_s={:.3f} backward_s={:.3f} comm_busy_s={:.4f} comm_wait_s={:.4f} "
        "optimizer_s={:.3f} hidden={:.3f} state_mib={:.1f} live_mib={:.1f}\n",
        N, kShardingStageNames.name(a.sharding), int(a.deterministic), a.accum, total, a.bucket_mb,
        wall / k, double(N) * a.B * a.T * a.accum * k / wall, sum.forward_s / k, sum.backward_s / k,
        sum.comm_busy_s / k, sum.comm_wait_s / k, sum.optimizer_s / k, sum.hidden_fraction(),
        double(dp->state_bytes().total()) / 1048576.0, live_mib);
}

}  // namespace
}  // namespace trainer::app

int main(int argc, char** argv) {
  try {
    trainer::app::run(argc, argv);
  } catch (const trainer::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
