// `trainer bench`: training-step speed on synthetic tokens (no data files needed): ms per
// step, tokens/s, achieved GFLOP/s and MFU against this machine's GEMM rate for the precision
// measured in the same run (or a stated peak), activation memory (and on a GPU all device
// buffers), plus a per-op profile of where the time goes and its share by kernel family, each
// op's rate set against its limit measured in the same run: the GEMM rate at its products'
// shapes, or the memory bandwidth (Note [Profile work] in runtime/profile.h).
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "app/memory_plan.h"
#include "app/options.h"
#include "app/run_setup.h"
#include "dist/communicator.h"
#include "nn/adamw.h"
#include "nn/dropout.h"
#include "nn/lora.h"
#include "nn/ops/residual.h"
#include "nn/ops/sum_squares.h"
#include "nn/transformer.h"
#include "runtime/buffer.h"
#include "runtime/cuda/stream.h"
#include "runtime/device.h"
#include "runtime/fallback.h"
#include "runtime/gemm.h"
#include "runtime/memory.h"
#include "runtime/profile.h"
#include "runtime/rng.h"
#include "runtime/timer.h"
#include "runtime/workspace.h"

namespace trainer::app {

namespace {

// The best rate (GB/s) of `pass`, which moves `bytes`, over trials of min_seconds in all.
template <typename Pass>
double best_rate(const Context& ctx, double bytes, double min_seconds, Pass&& pass) {
  pass();  // warm-up
  synchronize(ctx);
  double best = 0;
  Timer total;
  do {
    Timer t;
    pass();
    synchronize(ctx);
    best = std::max(best, bytes / t.seconds() / 1e9);
  } while (total.seconds() < min_seconds);
  return best;
}

// The memory bandwidth (GB/s) elementwise ops reach on ctx's device, counted as the profile
// counts their traffic (Note [Profile work]), and the pass that reached it: the best of three
// ops over fp32 buffers of 128 MiB, beyond any cache, whose patterns differ in speed: a
// read-only sum of squares (4 bytes an element), the residual op's out = a + b (16: a written
// line is read first) and a += b in place (12, as AdamW's updates are).
std::pair<double, const char*> measure_bandwidth(const Context& ctx, double min_seconds) {
  const int64_t n = int64_t(32) << 20;
  Buffer a(size_t(n) * 4, ctx.device), b(size_t(n) * 4, ctx.device), out(size_t(n) * 4, ctx.device),
      squares(8, ctx.device);
  const Tensor ta = a.view(DType::f32, n), tb = b.view(DType::f32, n),
               tout = out.view(DType::f32, n);
  for (const Tensor& t : {ta, tb}) fill_zero(ctx, t);  // mapped pages read from memory, not zero
  Workspace ws(nn::sum_squares_workspace(ctx), ctx.device);
  Context local = ctx;
  local.workspace = &ws;
  const std::pair<double, const char*> rates[] = {
      {best_rate(local, 4.0 * double(n), min_seconds / 3,
                 [&] { nn::sum_squares(local, squares.view(DType::f64, 1), ta); }),
       "a read-only sum"},
      {best_rate(local, 16.0 * double(n), min_seconds / 3,
                 [&] { nn::residual_forward(local, tout, ta, tb); }),
       "out = a + b"},
      {best_rate(local, 12.0 * double(n), min_seconds / 3,
                 [&] { nn::residual_forward(local, tout, tout, tb); }),
       "a += b"}};
  return *std::max_element(std::begin(rates), std::end(rates));
}

// What the machine can do, against which each op's own time is set (Note [Profile work]): the
// bandwidth, and the GEMM rate at each product shape the profile saw, measured alone.
struct Limits {
  double bandwidth = 0;                         // GB/s
  std::map<profile::GemmShape, double> gflops;  // by shape

  // The time `e`'s work takes at these rates (its products', or else its traffic's), or -1
  // where the profile has none for it (a compute-bound op without matmul products).
  double ms(const profile::Entry& e) const {
    if (!e.products.empty()) {
      double ms = 0;
      for (const auto& [shape, calls] : e.products)
        if (shape.flops() > 0) ms += double(calls) * shape.flops() / (gflops.at(shape) * 1e6);
      return ms;
    }
    return e.bytes > 0 ? e.bytes / (bandwidth * 1e6) : -1;
  }
};

Limits measure_limits(const Context& ctx, const std::vector<profile::Entry>& entries,
                      double bandwidth) {
  Limits l{bandwidth, {}};
  for (const profile::Entry& e : entries)
    for (const auto& [shape, calls] : e.products)
      if (!l.gflops.contains(shape)) l.gflops[shape] = measure_gemm_gflops(ctx, shape, 0.2);
  return l;
}

// Each scope's own time per step and share of the `total_ms` the steps took, with its rate
// and how close it comes to its limit, then the kernel families' (the scopes' own times, so
// each moment counts once: Note [Profile families]) and their share of their limits. The
// limits are measured here, after the steps; `peak_before` is the GEMM peak before them.
void print_profile(const Context& ctx, int steps, double total_ms, DType compute,
                   double peak_before) {
  const std::pair<double, const char*> measured = measure_bandwidth(ctx, 1.5);
  const double bandwidth = measured.first;
  const std::vector<profile::Entry> entries = profile::report();
  const Limits limits = measure_limits(ctx, entries, bandwidth);
  std::map<std::string, double> families, family_limit, family_limited;
  double ops = 0;
  for (const auto& e : entries) {
    const double limit = limits.ms(e);
    std::string rate;
    if (limit >= 0 && e.ms > 0) {
      rate = e.products.empty() ? fmt::format("{:7.1f} GB/s     {:3.0f}% of the bandwidth",
                                              e.bytes / e.ms / 1e6, 100 * limit / e.ms)
                                : fmt::format("{:7.1f} GFLOP/s  {:3.0f}% of GEMM at its shapes",
                                              e.flops() / e.ms / 1e6, 100 * limit / e.ms);
      family_limit[e.family] += limit;
      family_limited[e.family] += e.ms;
    }
    std::printf("  %-28s %8.2f ms/step %5.1f%%  %-11s %s\n", e.name.c_str(), e.ms / steps,
                100 * e.ms / total_ms, e.family.c_str(), rate.c_str());
    families[e.family] += e.ms;
    ops += e.ms;
  }
  families["(between ops)"] = total_ms - ops;
  std::printf("  families:");
  for (const auto& [name, ms] : families)
    std::printf(" %s %.1f%%", name.c_str(), 100 * ms / total_ms);
  std::printf(
      "\n  against their limits (the time their work takes at the GEMM rate of each "
      "product's shape, or at %.1f GB/s, %s):",
      bandwidth, measured.second);
  for (const auto& [name, limit] : family_limit)
    std::printf(" %s %.0f%%", name.c_str(), 100 * limit / family_limited[name]);
  // A shared machine's speed drifts: the peak again, after the steps, says by how much.
  std::printf("\n  the GEMM peak was %.1f GFLOP/s before the steps and %.1f after them\n",
              peak_before, measure_gemm_peak(ctx, compute, 1.0));
}

}  // namespace

int cmd_bench(const Args& args) {
  po::options_description desc("bench options");
  po::positional_options_description pos;
  add_config_options(desc, pos);
  desc.add_options()("batch,B", po::value<int>()->default_value(8), "rows per step")(
      "seq,T", po::value<int>()->default_value(256),
      "row length (also model.max_seq_len unless the config states it)")(
      "steps", po::value<int>()->default_value(10), "timed steps")(
      "warmup", po::value<int>()->default_value(2), "untimed steps before them")(
      "peak-gflops", po::value<double>()->default_value(0),
      "the rate MFU is reported against (0: the GEMM rate measured here; 989000 for an H100 or "
      "H200's dense bf16)")("profile", "print a per-op time profile (CUDA: timed by events)")(
      "gemm", "only measure the GEMM rate (of model.precision) at a few square sizes");
  po::variables_map vm;
  if (!parse_options("bench", args, desc, vm, &pos)) return 0;
  for (const char* k : {"batch", "steps"}) require_range("bench", vm, k, 1, 4096);
  require_range("bench", vm, "warmup", 0, 4096);
  require_range("bench", vm, "seq", 1, 1 << 16);
  const int B = vm["batch"].as<int>(), T = vm["seq"].as<int>(), steps = vm["steps"].as<int>();
  // The model, its precision, checkpointing, device and CUDA options are the run's keys.
  Config config = config_from(vm);
  if (!config.stated("model.max_seq_len")) config.set("model.max_seq_len", int64_t(T));
  const nn::ModelConfig mc = model_config(config);
  nn::ExecConfig exec = exec_config(config, B, T);
  if (exec.cuda_graphs && exec.device != Device::cuda)
    throw UsageError("bench: train.cuda_graphs needs run.device = cuda");
  if (exec.device == Device::cuda && cuda_device_count() == 0)
    throw UsageError(cuda_built()
                         ? "bench: run.device = cuda but this machine has no CUDA GPU"
                         : "bench: run.device = cuda but this trainer has no CUDA backend");
  std::unique_ptr<CudaStream> stream;  // a GPU model's work goes to its own stream
  if (exec.device == Device::cuda) {
    std::printf("versions: %s, NCCL %s\n", cuda_versions().c_str(), dist::nccl_version().c_str());
    stream = std::make_unique<CudaStream>();
    exec.stream = stream->get();
  }
  Context ctx;
  ctx.device = exec.device;
  ctx.stream = exec.stream;
  ctx.bf16_math = detect_cpu_bf16_math();
  if (vm.count("gemm")) {
    for (int64_t n : {256, 512, 1024, 2048})
      std::printf("oneDNN %s GEMM %4ld^3: %.1f GFLOP/s\n",
                  std::string(float_dtype_name(exec.compute)).c_str(), long(n),
                  measure_gemm_gflops(ctx, exec.compute, n, 1.0));
    return 0;
  }
  nn::Transformer model(mc, exec);
  model.init_weights(1);
  // The base of a LoRA model is frozen, as a run freezes it.
  const auto frozen = [&](const std::string& name) {
    return nn::frozen_by_lora(mc, model.layout().find(name)->role);
  };
  nn::AdamW opt(model.layout(), {}, {{0, model.layout().total(), 0}}, frozen, exec.device);
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  Rng rng(7);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t(rng.next_u64() % uint64_t(mc.vocab_size));
    targets[i] = int32_t(rng.next_u64() % uint64_t(mc.vocab_size));
  }
  // A training batch: it drops where the model has dropout (model.dropout), as a run's would.
  const nn::BatchView batch{
      B, T, tokens.data(), targets.data(), nullptr, nullptr, nn::dropout_batch_key(1, 0, 0)};
  // The step as earlier versions measured it (comparable across commits): forward, backward
  // and AdamW, without gradient clipping.
  auto step = [&] {
    model.zero_grads();
    model.reset_loss();
    const int64_t count = model.forward(batch);
    model.backward(1.0f / float(count));
    opt.step(model.context(), model.params(), model.grads(), model.working_copy(), 1e-4f, 1.0f);
  };
  const double stated = vm["peak-gflops"].as<double>();
  if (stated < 0) throw UsageError("bench: --peak-gflops must not be negative");
  const double peak = stated > 0 ? stated : measure_gemm_peak(ctx, exec.compute, 2.0);
  // The profile's check of the machine's drift: the GEMM peak just before the steps and again
  // after them, measured alike.
  const bool profiling = vm.count("profile") > 0;
  const double peak_before = profiling ? measure_gemm_peak(ctx, exec.compute, 1.0) : 0;
  Buffer::reset_peaks(exec.device);  // the report's peaks are the steps' (Note [Memory report])
  for (int i = 0; i < vm["warmup"].as<int>(); ++i) step();
  synchronize(model.context());
  profile::set_enabled(profiling);
  profile::set_cuda_stream(exec.stream);
  Timer t;
  for (int i = 0; i < steps; ++i) step();
  synchronize(model.context());  // a GPU's steps are queued: time them done
  const double s = t.seconds() / steps;
  profile::set_enabled(false);
  const double tok_s = double(B) * T / s;
  const double gflops = mc.token_flops().at(T) * tok_s / 1e9;
  // What the steps used, read before the profile's limits allocate their own trials.
  const std::vector<fallback::Count> fallbacks = fallback::counts();
  const std::string device_memory =
      exec.device == Device::cuda
          ? fmt::format(" | device buffers {:.1f} MiB",
                        double(Buffer::live_bytes(Device::cuda)) / 1048576.0)
          : "";
  // The model's own state (no data-parallel layer: its masters are the model's parameters).
  const nn::Transformer::Memory mem = model.memory();
  const dist::StateBytes state{mem.params, mem.working, mem.grads,
                               2 * opt.state_size() * int64_t(sizeof(float)), 0};
  const std::string memory = memory_report({state, mem, 0}, exec.device, -1);
  if (profiling) print_profile(ctx, steps, t.ms(), exec.compute, peak_before);
  for (const fallback::Count& f : fallbacks)
    std::printf("  fallback: %s, %ld calls (%s)\n", f.path.c_str(), f.calls, f.why.c_str());
  profile::set_cuda_stream(nullptr);
  std::printf(
      "bench %s L=%d C=%d H=%d V=%d B=%d T=%d %s %s: %.1f ms/step | %.0f tok/s | %.1f GFLOP/s | "
      "%s %.1f GFLOP/s | MFU %.1f%% | activations %.1f MiB%s%s | fallbacks: %s\n",
      mc.arch.c_str(), mc.n_layer, mc.n_embd, mc.n_head, mc.vocab_size, B, T,
      std::string(float_dtype_name(exec.compute)).c_str(), nn::kRecomputeNames.name(exec.recompute),
      s * 1e3, tok_s, gflops, stated > 0 ? "stated peak" : "GEMM peak", peak, 100 * gflops / peak,
      double(model.memory().activations) / 1048576.0, device_memory.c_str(),
      exec.cuda_graphs && !vm.count("profile") ? " | CUDA graphs" : "",
      fallbacks.empty() ? "none" : fmt::format("{} path(s), see above", fallbacks.size()).c_str());
  std::printf("%s\n", memory.c_str());
  return 0;
}

}  // namespace trainer::app
