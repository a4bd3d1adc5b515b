// `trainer inspect`: a checkpoint's manifest, trainer state, config and tensor list.
#include <fmt/ranges.h>

#include <cstdio>

#include "app/checkpoint.h"
#include "app/options.h"
#include "app/saved_model.h"
#include "runtime/safetensors.h"

namespace trainer::app {

int cmd_inspect(const Args& args) {
  po::options_description desc("inspect options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(),
                     "checkpoint directory, or a run directory (its latest); also positional");
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::variables_map vm;
  if (!parse_options("inspect", args, desc, vm, &pos)) return 0;
  Checkpoint c = open_checkpoint(checkpoint_dir_of(vm["checkpoint"].as<std::string>()));
  std::printf("checkpoint %s (all %zu files verified)\n\nmanifest:\n%s\n\nconfig:\n%s\n",
              c.dir.c_str(), c.manifest.at("files").size(), c.manifest.dump(2).c_str(),
              c.config_yaml.c_str());
  SafetensorsFile model(c.dir / "model.safetensors");
  int64_t total = 0;
  std::printf("tensors:\n");
  for (const TensorEntry& t : model.tensors()) {
    std::printf("  %-32s %-4s [%s]\n", t.name.c_str(), std::string(dtype_name(t.dtype)).c_str(),
                fmt::format("{}", fmt::join(t.shape, ", ")).c_str());
    total += t.numel();
  }
  std::printf("  %zu tensors, %ld parameters\n", model.tensors().size(), long(total));
  return 0;
}

}  // namespace trainer::app
