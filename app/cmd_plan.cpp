// `trainer plan`: the bytes per rank a config needs, from the same layouts the trainer
// allocates (parameters, gradients, AdamW moments, activations).
#include <cstdio>

#include "app/options.h"
#include "app/run_setup.h"
#include "nn/activations.h"
#include "nn/param_layout.h"
#include "runtime/error.h"

namespace trainer::app {

int cmd_plan(const Args& args) {
  po::options_description desc("plan options");
  add_config_options(desc);
  desc.add_options()("world-size", po::value<int>()->default_value(1), "ranks (DDP replicas)");
  po::variables_map vm;
  if (!parse_options("plan", args, desc, vm)) return 0;
  Config c = config_from(vm);
  const int world = vm["world-size"].as<int>();
  if (world < 1) throw UsageError("plan: --world-size must be at least 1");
  nn::ModelConfig mc = model_config(c);
  nn::ParamLayout layout(mc);
  data::LoaderConfig lc = loader_config(c, "train");
  const int rows = model_rows(lc);
  nn::ActivationLayout acts(mc, rows, lc.seq_len);
  int64_t trainable = 0;
  for (const nn::ParamInfo& p : layout.params())
    if (!matches_any(p.name, c.list("train.freeze"))) trainable += p.numel;
  const double MiB = 1048576.0;
  const double params = double(layout.total()) * 4, grads = params;
  const double optim = double(trainable) * 8, activ = double(acts.bytes());
  std::printf("plan for %s: %d layers, C=%d, V=%d, %ld parameters (%ld trainable)\n",
              vm["config"].as<std::string>().c_str(), mc.n_layer, mc.n_embd, mc.vocab_size,
              long(layout.total()), long(trainable));
  std::printf("micro-batch %d x %d tokens, world size %d (DDP: every rank holds a full replica)\n",
              rows, lc.seq_len, world);
  std::printf("  %-28s %10.1f MiB\n", "parameters (fp32)", params / MiB);
  std::printf("  %-28s %10.1f MiB\n", "gradients (fp32)", grads / MiB);
  std::printf("  %-28s %10.1f MiB\n", "optimizer state (AdamW m, v)", optim / MiB);
  std::printf("  %-28s %10.1f MiB\n", "activations", activ / MiB);
  std::printf("  %-28s %10.1f MiB per rank\n", "total", (params + grads + optim + activ) / MiB);
  return 0;
}

}  // namespace trainer::app
