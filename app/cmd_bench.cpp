// `trainer bench`: training-step speed on synthetic tokens (no data files needed): ms per
// step, tokens/s, achieved GFLOP/s and MFU against this machine's GEMM rate for the precision
// measured in the same run (or a stated peak), activation memory (and on a GPU all device
// buffers), plus a per-op profile of where the time goes and its share by kernel family.
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

namespace trainer::app {

namespace {

// Each scope's own time per step and share of the `total_ms` the steps took, then the kernel
// families' (the scopes' own times, so each moment counts once: Note [Profile families]).
void print_profile(int steps, double total_ms) {
  std::map<std::string, double> families;
  double ops = 0;
  for (const auto& e : profile::report()) {
    std::printf("  %-28s %8.2f ms/step %5.1f%%  %s\n", e.name.c_str(), e.ms / steps,
                100 * e.ms / total_ms, e.family.c_str());
    families[e.family] += e.ms;
    ops += e.ms;
  }
  families["(between ops)"] = total_ms - ops;
  std::printf("  families:");
  for (const auto& [name, ms] : families)
    std::printf(" %s %.1f%%", name.c_str(), 100 * ms / total_ms);
  std::printf("\n");
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
  Buffer::reset_peaks(exec.device);  // the report's peaks are the steps' (Note [Memory report])
  for (int i = 0; i < vm["warmup"].as<int>(); ++i) step();
  synchronize(model.context());
  profile::set_enabled(vm.count("profile") > 0);
  profile::set_cuda_stream(exec.stream);
  Timer t;
  for (int i = 0; i < steps; ++i) step();
  synchronize(model.context());  // a GPU's steps are queued: time them done
  const double s = t.seconds() / steps;
  profile::set_enabled(false);
  const double tok_s = double(B) * T / s;
  const double gflops = mc.token_flops().at(T) * tok_s / 1e9;
  if (vm.count("profile")) print_profile(steps, t.ms());
  const std::vector<fallback::Count> fallbacks = fallback::counts();
  for (const fallback::Count& f : fallbacks)
    std::printf("  fallback: %s, %ld calls (%s)\n", f.path.c_str(), f.calls, f.why.c_str());
  profile::set_cuda_stream(nullptr);
  const std::string device_memory =
      exec.device == Device::cuda
          ? fmt::format(" | device buffers {:.1f} MiB",
                        double(Buffer::live_bytes(Device::cuda)) / 1048576.0)
          : "";
  std::printf(
      "bench %s L=%d C=%d H=%d V=%d B=%d T=%d %s %s: %.1f ms/step | %.0f tok/s | %.1f GFLOP/s | "
      "%s %.1f GFLOP/s | MFU %.1f%% | activations %.1f MiB%s%s | fallbacks: %s\n",
      mc.arch.c_str(), mc.n_layer, mc.n_embd, mc.n_head, mc.vocab_size, B, T,
      std::string(float_dtype_name(exec.compute)).c_str(), nn::kRecomputeNames.name(exec.recompute),
      s * 1e3, tok_s, gflops, stated > 0 ? "stated peak" : "GEMM peak", peak, 100 * gflops / peak,
      double(model.memory().activations) / 1048576.0, device_memory.c_str(),
      exec.cuda_graphs && !vm.count("profile") ? " | CUDA graphs" : "",
      fallbacks.empty() ? "none" : fmt::format("{} path(s), see above", fallbacks.size()).c_str());
  // The model's own state (no data-parallel layer: its masters are the model's parameters).
  const nn::Transformer::Memory mem = model.memory();
  const dist::StateBytes state{mem.params, mem.working, mem.grads,
                               2 * opt.state_size() * int64_t(sizeof(float)), 0};
  std::printf("%s\n", memory_report({state, mem, 0}, exec.device, -1).c_str());
  return 0;
}

}  // namespace trainer::app
