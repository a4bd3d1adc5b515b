// `trainer plan`: the bytes per rank a config needs, from the same plans the trainer allocates
// by (parameters, working copy, gradients, AdamW moments, activations under the checkpointing
// policy, op workspace), without allocating them.
#include <cstdio>

#include "app/options.h"
#include "app/run_setup.h"
#include "nn/activation_plan.h"
#include "nn/param_layout.h"
#include "nn/transformer.h"
#include "runtime/error.h"

namespace trainer::app {

int cmd_plan(const Args& args) {
  po::options_description desc("plan options");
  po::positional_options_description pos;
  add_config_options(desc, pos);
  desc.add_options()("world-size", po::value<int>()->default_value(1), "ranks (DDP replicas)");
  po::variables_map vm;
  if (!parse_options("plan", args, desc, vm, &pos)) return 0;
  const Config c = config_from(vm);
  require_range("plan", vm, "world-size", 1, 1 << 20);
  const int world = vm["world-size"].as<int>();
  const RunConfig rc = resolve_run(c);
  const nn::ParamLayout layout(rc.model);
  int64_t trainable = 0;
  for (const nn::ParamInfo& p : layout.params())
    if (!matches_any(p.name, rc.freeze)) trainable += p.numel;
  const nn::Transformer::Memory m = nn::Transformer::planned_memory(rc.model, rc.exec);
  const nn::ActivationPlan acts(rc.model, rc.exec);
  const double MiB = 1048576.0, optim = double(trainable) * 8;
  const nn::ExecConfig& e = rc.exec;
  std::printf("plan for %s: %d layers, C=%d, V=%d, %ld parameters (%ld trainable)\n",
              vm["config"].as<std::string>().c_str(), rc.model.n_layer, rc.model.n_embd,
              rc.model.vocab_size, long(layout.total()), long(trainable));
  std::printf(
      "precision %s, gradients %s, activation checkpointing %s; micro-batch %d x %d tokens; "
      "world size %d (DDP: every rank holds a full replica)\n",
      std::string(float_dtype_name(e.compute)).c_str(),
      std::string(float_dtype_name(e.grad)).c_str(), nn::recompute_name(e.recompute), e.max_rows,
      e.max_seq_len, world);
  auto row = [&](const char* what, double bytes) {
    std::printf("  %-32s %10.1f MiB\n", what, bytes / MiB);
  };
  row("parameters (fp32 masters)", double(m.params));
  if (m.working) row("working copy (bf16)", double(m.working));
  row(e.grad == DType::bf16 ? "gradients (bf16)" : "gradients (fp32)", double(m.grads));
  row("optimizer state (AdamW m, v)", optim);
  row("activations", double(m.activations));
  int64_t kept = 0;
  for (int l = 0; l < rc.model.n_layer; ++l) kept += acts.kept_bytes(l);
  row("  of which kept by blocks", double(kept));
  row("  of which logits / block scratch", double(acts.shared_bytes()));
  row("op workspace", double(m.workspace));
  row("batch inputs", double(m.inputs));
  std::printf("  %-32s %10.1f MiB per rank\n", "total", (double(m.total()) + optim) / MiB);
  return 0;
}

}  // namespace trainer::app
