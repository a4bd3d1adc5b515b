// `trainer plan`: the bytes per rank a config needs, from the same plans the trainer allocates
// by (model state under the sharding stage, activations under the checkpointing policy, op
// workspace, each of the rank's tensor-parallel slice and pipeline stage), without allocating
// them; and the same for every sharding stage and precision, every tensor-parallel degree, or
// every pipeline stage under each schedule.
#include <algorithm>
#include <cstdio>

#include "app/memory_plan.h"
#include "app/options.h"
#include "app/run_setup.h"
#include "dist/data_parallel.h"
#include "dist/pipeline_schedule.h"
#include "nn/activation_plan.h"
#include "nn/ops/attention_cudnn_workspace.h"
#include "nn/param_layout.h"
#include "nn/pipeline_split.h"
#include "nn/transformer.h"
#include "runtime/error.h"

namespace trainer::app {

namespace {

// The configured run in detail: what each rank allocates, by purpose.
void print_configured(const RunConfig& rc, int world) {
  const nn::ExecConfig& e = rc.exec;
  const int data = world / rc.tensor_parallel / rc.pipeline_parallel;
  const MemoryPlan plan = plan_memory(rc, data);
  const nn::Transformer::Memory& m = plan.model;
  const dist::StateBytes& st = plan.state;
  const nn::ActivationPlan acts(rc.model, e);
  std::printf(
      "precision %s, gradients %s, activation checkpointing %s; micro-batch %d x %d tokens; "
      "world size %d = %d tensor x %d pipeline x %d data, sharding %s%s\n",
      std::string(float_dtype_name(e.compute)).c_str(),
      std::string(float_dtype_name(e.grad)).c_str(), nn::kRecomputeNames.name(e.recompute),
      e.max_rows, e.max_seq_len, world, rc.tensor_parallel, rc.pipeline_parallel, data,
      dist::kShardingStageNames.name(rc.sharding),
      rc.pipeline_parallel > 1 ? "; the first pipeline stage (every stage: below)" : "");
  auto row = [&](const char* what, double bytes) {
    std::printf("  %-34s %10.1f MiB\n", what, bytes / kMiB);
  };
  row("parameters (fp32 masters)", double(st.masters));
  if (st.working) row("working weights", double(st.working));
  row("gradients", double(st.grads));
  row("optimizer state (AdamW m, v)", double(st.optimizer));
  if (st.buffers) row("unit buffers (gathers, reductions)", double(st.buffers));
  row("activations", double(m.activations));
  int64_t kept = 0;
  for (int l = 0; l < rc.model.n_layer; ++l) kept += acts.kept_bytes(l);
  row("  of which kept by blocks", double(kept));
  row("  of which logits / block scratch", double(acts.shared_bytes()));
  row("op workspace", double(m.workspace));
  if (e.device == Device::cuda && e.compute == DType::bf16 && e.training) {
    // The largest share, cuDNN attention's backward (Note [cuDNN attention workspace]).
    const nn::CudnnAttentionWorkspace w = nn::cudnn_attention_workspace_plan(
        e.max_rows, rc.model.local_heads(), e.max_seq_len, rc.model.head_size(), true,
        e.attention_backward == nn::AttentionBackward::deterministic);
    row("  of which cuDNN attention", double(w.total()));
  }
  row("batch inputs", double(m.inputs));
  if (plan.checkpoint) row("checkpoint.async's host copy", double(plan.checkpoint));
  std::printf("  %-34s %10.1f MiB per rank\n", "total", double(plan.total()) / kMiB);
  if (e.device == Device::cpu) {  // this machine's, for a run here (Note [Memory check])
    const AvailableMemory a = available_memory(Device::cpu);
    if (a.bytes >= 0)
      std::printf("  %s: %.1f MiB available here (%s)\n",
                  double(plan.total()) <= double(a.bytes) ? "fits one rank" : "does NOT fit",
                  double(a.bytes) / kMiB, a.source.c_str());
  }
}

// Every sharding stage in fp32 and bf16, with and without activation checkpointing.
void print_stages(const RunConfig& rc, const nn::ParamLayout& layout, int world) {
  std::printf(
      "\nevery stage on %d data-parallel rank(s), MiB per rank (activations and totals: "
      "checkpointing none / "
      "full):\n  %-10s %-9s %9s %9s %9s %9s %9s %19s %21s\n",
      world, "sharding", "precision", "masters", "weights", "gradients", "optimizer", "buffers",
      "activations*", "total");
  for (DType compute : {DType::f32, DType::bf16}) {
    nn::ExecConfig e = rc.exec;
    e.compute = compute;
    e.grad = compute == DType::f32 ? DType::f32 : rc.exec.grad;
    e.recompute_layers.clear();
    int64_t rest[2];  // activations, workspace and inputs without and with full checkpointing
    for (int k = 0; k < 2; ++k) {
      e.recompute = k == 0 ? nn::Recompute::none : nn::Recompute::full;
      const nn::Transformer::Memory m = nn::Transformer::planned_memory(rc.model, e);
      rest[k] = m.activations + m.workspace + m.inputs;
    }
    for (const auto& [stage, name] : dist::kShardingStageNames.entries) {
      dist::ParallelConfig pc;
      pc.sharding = stage;
      pc.reshard_after_forward = rc.reshard_after_forward;
      pc.is_frozen = frozen_by_name(layout, rc);
      const dist::StateBytes st = dist::planned_state_bytes(layout, pc, world, e.compute, e.grad);
      std::printf("  %-10s %-9s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f /%8.1f %10.1f /%9.1f\n", name,
                  compute == DType::f32 ? "fp32" : (e.grad == DType::bf16 ? "bf16" : "bf16/g32"),
                  st.masters / kMiB, st.working / kMiB, st.grads / kMiB, st.optimizer / kMiB,
                  st.buffers / kMiB, rest[0] / kMiB, rest[1] / kMiB,
                  double(st.total() + rest[0]) / kMiB, double(st.total() + rest[1]) / kMiB);
    }
  }
  std::printf(
      "  (* with the op workspace and batch inputs; bf16/g32: bf16 compute, fp32 gradients; the "
      "sharded stages' gradients include the fp32 shard they sum into)\n");
}

// The configured stage and precision at every tensor-parallel degree that divides the world and
// cuts the model evenly.
void print_tensor_degrees(RunConfig rc, int world) {
  std::printf(
      "\nevery tensor-parallel degree on %d rank(s), sharding %s, MiB per rank (activations and "
      "totals: without / with sequence parallelism):\n  %-7s %-6s %14s %9s %9s %9s %9s %21s "
      "%21s\n",
      world, dist::kShardingStageNames.name(rc.sharding), "tensor", "data", "parameters", "masters",
      "gradients", "optimizer", "buffers", "activations", "total");
  for (int t = 1; t <= std::min(world, 4096); ++t) {  // dist.tensor_parallel's range
    if (world % t != 0) continue;
    rc.tensor_parallel = t;
    rc.model.tensor = {t, 0, false};
    try {
      const nn::ParamLayout layout(rc.model);  // throws where the model does not cut by t
      const MemoryPlan p = plan_memory(rc, world / t);
      rc.model.tensor.sequence = t > 1;
      const MemoryPlan sp = plan_memory(rc, world / t);
      const dist::StateBytes& st = p.state;
      std::printf("  %-7d %-6d %14lld %9.1f %9.1f %9.1f %9.1f %10.1f /%9.1f %10.1f /%9.1f\n", t,
                  world / t, (long long)layout.total(), st.masters / kMiB, st.grads / kMiB,
                  st.optimizer / kMiB, (st.buffers + st.working) / kMiB, p.model.activations / kMiB,
                  sp.model.activations / kMiB, double(p.total()) / kMiB, double(sp.total()) / kMiB);
    } catch (const UsageError&) {
      continue;  // the model does not cut into t slices
    }
  }
  std::printf(
      "  (parameters: each rank's slice with its alignment; buffers: with the working weights)\n");
}

// Every pipeline stage under each schedule (interleaved: the configured virtual stages, else
// 2): its layers, the micro-batches it holds, its parameters, state and activations. The first
// stage holds the embedding, the last the head and the logits.
void print_pipeline(const RunConfig& rc, int world) {
  const int P = rc.pipeline_parallel, D = world / (rc.tensor_parallel * P);
  std::printf(
      "\nevery pipeline stage on %d data-parallel rank(s) of %d tensor rank(s), sharding %s, "
      "%lld micro-batch(es) per step, MiB per rank:\n  %-12s %-5s %-11s %5s %14s %9s %11s %9s\n",
      D, rc.tensor_parallel, dist::kShardingStageNames.name(rc.sharding),
      (long long)most_micro_batches(rc, D), "schedule", "stage", "layers", "held", "parameters",
      "state", "activations", "total");
  for (const auto& [schedule, name] : dist::kPipelineScheduleNames.entries) {
    const bool interleaved = schedule == dist::PipelineSchedule::interleaved;
    const int V = !interleaved ? 1 : std::max(2, rc.pipeline_chunks);
    std::vector<std::pair<int, int>> split;
    try {
      split = schedule == rc.pipeline_schedule ? rc.pipeline_split
                                               : nn::pipeline_split(rc.model, P, V, {});
    } catch (const UsageError& e) {
      std::printf("  %-12s %s\n", name, e.what());
      continue;
    }
    for (int s = 0; s < P; ++s) {
      RunConfig r = rc;
      r.model.pipeline = nn::stage_slice(split, P, s);
      r.exec.activation_slots = held_micro_batches(rc, schedule, V, s, D);
      const MemoryPlan plan = plan_memory(r, D);
      const nn::ParamLayout layout(r.model);
      std::string layers;
      for (const auto& [b, e] : r.model.pipeline.chunks)
        layers += fmt::format("{}{}-{}", layers.empty() ? "" : ",", b, e - 1);
      std::printf("  %-12s %-5d %-11s %5d %14lld %9.1f %11.1f %9.1f\n", s == 0 ? name : "", s,
                  layers.c_str(), r.exec.activation_slots, (long long)layout.total(),
                  double(plan.state.total()) / kMiB, double(plan.model.activations) / kMiB,
                  double(plan.total()) / kMiB);
    }
  }
  std::printf(
      "  (held: micro-batches whose activations a stage keeps at once; parameters: the stage's "
      "slice with its alignment, a tied embedding's copy on the last stage included)\n");
}

}  // namespace

int cmd_plan(const Args& args) {
  po::options_description desc("plan options");
  po::positional_options_description pos;
  add_config_options(desc, pos);
  desc.add_options()("world-size", po::value<int>()->default_value(1), "ranks")(
      "tensor-parallel", po::value<int>(),
      "tensor-parallel degree (default: the config's dist.tensor_parallel)")(
      "pipeline-parallel", po::value<int>(),
      "pipeline stages (default: the config's dist.pipeline_parallel)");
  po::variables_map vm;
  if (!parse_options("plan", args, desc, vm, &pos)) return 0;
  const Config c = config_from(vm);
  require_range("plan", vm, "world-size", 1, 1 << 20);
  const int world = vm["world-size"].as<int>();
  RunConfig rc = resolve_run(c);
  if (vm.count("tensor-parallel")) {
    require_range("plan", vm, "tensor-parallel", 1, 4096);
    rc.tensor_parallel = vm["tensor-parallel"].as<int>();
    rc.model.tensor = {rc.tensor_parallel, 0, rc.sequence_parallel && rc.tensor_parallel > 1};
  }
  if (vm.count("pipeline-parallel")) {
    require_range("plan", vm, "pipeline-parallel", 1, 4096);
    rc.pipeline_parallel = vm["pipeline-parallel"].as<int>();
    rc.pipeline_split = nn::pipeline_split(rc.model, rc.pipeline_parallel, rc.pipeline_chunks, {});
  }
  const int replica = rc.tensor_parallel * rc.pipeline_parallel;
  if (world % replica != 0)
    throw UsageError(
        fmt::format("--world-size {} is not a multiple of {} (the ranks form model replicas of "
                    "tensor-parallel degree {} x {} pipeline stages)",
                    world, replica, rc.tensor_parallel, rc.pipeline_parallel));
  const nn::ParamLayout layout(rc.model);  // the slice's; checks the cuts
  int64_t count = 0, mine = 0;
  for (const nn::ParamInfo& p : layout.params()) {
    count += p.full_numel();
    mine += p.numel;
  }
  std::printf("plan for %s: %d layers, C=%d, V=%d, %ld parameters (%ld in each rank's slice)\n",
              vm["config"].as<std::string>().c_str(), rc.model.n_layer, rc.model.n_embd,
              rc.model.vocab_size, long(count), long(mine));
  if (rc.exec.device == Device::cuda)  // what has run (docs/dist.md, "Not done")
    std::printf(
        "note: on GPUs the CUDA backend and NCCL (collectives%s) compile and link but have not "
        "run yet: no GPU has been lent to this project (docs/dist.md, \"Not done\")\n",
        rc.pipeline_parallel > 1 ? ", pipeline transfers" : "");
  if (rc.pipeline_parallel > 1) {  // the first stage as configured, then every stage
    RunConfig first = rc;
    first.model.pipeline = nn::stage_slice(rc.pipeline_split, rc.pipeline_parallel, 0);
    first.exec.activation_slots =
        held_micro_batches(rc, rc.pipeline_schedule, rc.pipeline_chunks, 0, world / replica);
    print_configured(first, world);
    print_pipeline(rc, world);
    return 0;
  }
  print_configured(rc, world);
  print_stages(rc, layout, world / rc.tensor_parallel);
  print_tensor_degrees(rc, world);
  return 0;
}

}  // namespace trainer::app
