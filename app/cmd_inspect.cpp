// `trainer inspect`: a checkpoint's manifest, trainer state, config and tensor list (with each
// tensor's flat offset, which sharded checkpoints' ranges refer to).
#include <fmt/ranges.h>

#include <cstdio>

#include "app/checkpoint.h"
#include "app/options.h"
#include "app/run_setup.h"
#include "app/saved_model.h"
#include "nn/param_layout.h"

namespace trainer::app {

int cmd_inspect(const Args& args) {
  po::options_description desc("inspect options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(),
                     "checkpoint directory, or a run directory (its latest); also positional");
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::variables_map vm;
  if (!parse_options("inspect", args, desc, vm, &pos)) return 0;
  Checkpoint c = open_checkpoint_of(vm["checkpoint"].as<std::string>());
  std::printf("checkpoint %s (all %zu files verified)\n\nmanifest:\n%s\n\nconfig:\n%s\n",
              c.dir.c_str(), c.manifest.at("files").size(), c.manifest.dump(2).c_str(),
              c.config_yaml.c_str());
  // The tensors as the model lays them out in the flat buffer (checked against the files).
  Config config;
  config.merge_yaml(c.config_yaml, (c.dir / "config.yaml").string());
  const nn::ParamLayout layout(model_config(config));
  const CheckpointTensors check(c, layout);
  std::printf("tensors (%s):\n",
              c.manifest.contains("shards")
                  ? fmt::format("{} shards", c.manifest.at("shards").size()).c_str()
                  : "whole");
  int64_t count = 0;
  for (const nn::ParamInfo& p : layout.params()) {
    count += p.numel;
    std::printf("  %-32s F32  [%s] at %ld\n", p.name.c_str(),
                fmt::format("{}", fmt::join(p.shape, ", ")).c_str(), long(p.offset));
  }
  std::printf("  %zu tensors, %ld parameters\n", layout.params().size(), long(count));
  return 0;
}

}  // namespace trainer::app
