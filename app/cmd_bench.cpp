// `trainer bench`: training-step speed on synthetic tokens (no data files needed): ms per
// step, tokens/s, achieved GFLOP/s and MFU against this machine's GEMM rate for the precision
// measured in the same run (or a stated peak), activation memory (and on a GPU all device
// buffers), plus a per-op profile of where the time goes and its share by kernel family.
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "app/options.h"
#include "nn/adamw.h"
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

DType parse_precision(const std::string& p) {
  if (p == "fp32") return DType::f32;
  if (p == "bf16") return DType::bf16;
  throw UsageError(fmt::format("bench: --precision must be fp32 or bf16, got '{}'", p));
}

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
  desc.add_options()("layers,L", po::value<int>()->default_value(6), "blocks")(
      "embd,C", po::value<int>()->default_value(384), "channels")(
      "heads,H", po::value<int>()->default_value(6), "attention heads")(
      "vocab,V", po::value<int>()->default_value(8192), "vocabulary")(
      "batch,B", po::value<int>()->default_value(8), "rows per step")(
      "seq,T", po::value<int>()->default_value(256), "row length")(
      "arch", po::value<std::string>()->default_value("gpt2"), "an architecture (model.arch)")(
      "kv-heads", po::value<int>()->default_value(0), "llama: key/value heads (0 = heads)")(
      "ffn", po::value<int>()->default_value(0), "llama: SwiGLU hidden size (0 = 8/3 C)")(
      "rotary-pct", po::value<double>()->default_value(1.0),
      "neox: the fraction of each head the rotary embeddings turn")(
      "steps", po::value<int>()->default_value(10), "timed steps")(
      "warmup", po::value<int>()->default_value(2), "untimed steps before them")(
      "precision", po::value<std::string>()->default_value("fp32"), "fp32 or bf16")(
      "device", po::value<std::string>()->default_value("cpu"), "cpu or cuda (GPU 0)")(
      "checkpointing", po::value<std::string>()->default_value("none"),
      "activation checkpointing: none, selective or full")(
      "attention-backward", po::value<std::string>()->default_value("deterministic"),
      "CUDA: deterministic or fast (train.attention_backward)")(
      "peak-gflops", po::value<double>()->default_value(0),
      "the rate MFU is reported against (0: the GEMM rate measured here; 989000 for an H100 or "
      "H200's dense bf16)")("profile", "print a per-op time profile (CUDA: timed by events)")(
      "cuda-graphs",
      "replay forward and backward as CUDA graphs (train.cuda_graphs; not with "
      "--profile, whose scopes are host work)")(
      "gemm", "only measure the GEMM rate (of --precision) at a few square sizes");
  po::variables_map vm;
  if (!parse_options("bench", args, desc, vm)) return 0;
  for (const char* k : {"layers", "heads", "batch", "steps"})
    require_range("bench", vm, k, 1, 4096);
  require_range("bench", vm, "warmup", 0, 4096);
  for (const char* k : {"embd", "seq"}) require_range("bench", vm, k, 1, 1 << 16);
  require_range("bench", vm, "vocab", 1, 1 << 24);
  require_range("bench", vm, "kv-heads", 0, 4096);
  require_range("bench", vm, "ffn", 0, 1 << 20);
  nn::ExecConfig exec;
  exec.compute = parse_precision(vm["precision"].as<std::string>());
  exec.recompute = nn::parse_recompute(vm["checkpointing"].as<std::string>());
  const std::string device = vm["device"].as<std::string>();
  if (device != "cpu" && device != "cuda")
    throw UsageError(fmt::format("bench: --device must be cpu or cuda, got '{}'", device));
  exec.device = device == "cuda" ? Device::cuda : Device::cpu;
  const std::string attention_backward = vm["attention-backward"].as<std::string>();
  if (attention_backward != "deterministic" && attention_backward != "fast")
    throw UsageError(fmt::format(
        "bench: --attention-backward must be deterministic or fast, got '{}'", attention_backward));
  exec.deterministic = attention_backward == "deterministic";
  exec.cuda_graphs = vm.count("cuda-graphs") > 0;
  if (exec.cuda_graphs && exec.device != Device::cuda)
    throw UsageError("bench: --cuda-graphs needs --device cuda");
  if (exec.device == Device::cuda && cuda_device_count() == 0)
    throw UsageError(cuda_built() ? "bench: --device cuda but this machine has no CUDA GPU"
                                  : "bench: --device cuda but this trainer has no CUDA backend");
  std::unique_ptr<CudaStream> stream;  // a GPU model's work goes to its own stream
  if (exec.device == Device::cuda) {
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
  nn::ModelConfig mc{.vocab_size = vm["vocab"].as<int>(),
                     .max_seq_len = vm["seq"].as<int>(),
                     .n_layer = vm["layers"].as<int>(),
                     .n_head = vm["heads"].as<int>(),
                     .n_embd = vm["embd"].as<int>()};
  mc.arch = vm["arch"].as<std::string>();
  mc.rotary_pct = vm["rotary-pct"].as<double>();
  mc.n_kv_head = vm["kv-heads"].as<int>();
  mc.ffn_hidden = vm["ffn"].as<int>();
  mc.ffn_multiple_of = 64;
  mc.validate();
  const int B = vm["batch"].as<int>(), T = vm["seq"].as<int>(), steps = vm["steps"].as<int>();
  exec.max_rows = B;
  exec.max_seq_len = T;
  nn::Transformer model(mc, exec);
  model.init_weights(1);
  nn::AdamW opt(model.layout(), {}, {{0, model.layout().total(), 0}}, nullptr, exec.device);
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  Rng rng(7);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t(rng.next_u64() % uint64_t(mc.vocab_size));
    targets[i] = int32_t(rng.next_u64() % uint64_t(mc.vocab_size));
  }
  const nn::BatchView batch{B, T, tokens.data(), targets.data(), nullptr, nullptr};
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
      std::string(float_dtype_name(exec.compute)).c_str(), nn::recompute_name(exec.recompute),
      s * 1e3, tok_s, gflops, stated > 0 ? "stated peak" : "GEMM peak", peak, 100 * gflops / peak,
      double(model.memory().activations) / 1048576.0, device_memory.c_str(),
      exec.cuda_graphs && !vm.count("profile") ? " | CUDA graphs" : "",
      fallbacks.empty() ? "none" : fmt::format("{} path(s), see above", fallbacks.size()).c_str());
  return 0;
}

}  // namespace trainer::app
