// `trainer inspect`: a checkpoint's manifest, trainer state, config and tensor list (with each
// tensor's flat offset, which sharded checkpoints' ranges refer to); or a Hugging Face folder's
// model, tokenizer and tensors; or a PEFT adapter's LoRA and tensors.
#include <fmt/ranges.h>

#include <cstdio>

#include "app/checkpoint.h"
#include "app/hf_folder.h"
#include "app/init_from.h"
#include "app/options.h"
#include "app/run_setup.h"
#include "app/saved_model.h"
#include "app/source_weights.h"
#include "dist/hosts.h"
#include "nn/hf_weights.h"
#include "nn/lora.h"
#include "nn/param_layout.h"

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

// Every tensor's values read and checked: a line for each one holding NaN or infinity, and
// whether the weights are usable. 1 when some are not (eval, sample, export and init_from
// refuse them), else 0: inspect's exit code.
int report_values(const SourceWeights& weights, const nn::ParamLayout& layout) {
  int broken = 0;
  for (const nn::ParamInfo& p : layout.params())
    if (const int64_t n = weights.count_nonfinite(p); n > 0) {
      if (broken++ == 0) std::printf("\nvalues: NOT FINITE in\n");
      std::printf("  %-40s %ld of %ld values NaN or infinite\n", p.name.c_str(), long(n),
                  long(p.numel));
    }
  if (broken == 0) {
    std::printf("\nvalues: all finite\n");
    return 0;
  }
  std::printf("  %d tensor(s) broken: eval, sample, export and train.init_from refuse them\n",
              broken);
  return 1;
}

// A Hugging Face folder: the model its config.json describes, its tokenizer and its tensors
// (every one checked against the model before anything is printed).
int inspect_folder(const ModelSource& source) {
  const fs::path& dir = source.dir;
  const Config& config = source.config;
  const nn::ModelConfig model = model_config(config);
  const nn::ParamLayout layout(model);
  const nn::HfWeights weights(dir, layout);
  const std::unique_ptr<data::Tokenizer> tok = hf_folder_tokenizer(dir);
  std::printf("Hugging Face folder %s (config.json, %s weights; all tensors checked)\n\n",
              dir.c_str(), std::string(dtype_name(weights.dtype())).c_str());
  std::printf("model:\n");
  for (const char* key : model_keys())
    std::printf("  %s: %s\n", key, config.to_yaml_value(key).c_str());
  if (tok)
    std::printf("\ntokenizer: %s (%s, %d tokens, hash %016llx, bos %d, eos %d)\n",
                tok->path().c_str(), tok->kind(), tok->vocab_size(),
                (unsigned long long)tok->hash(), tok->bos_id(), tok->eos_id());
  else
    std::printf("\ntokenizer: none\n");
  std::printf("\ntensors:\n");
  int64_t count = 0;
  for (const nn::ParamInfo& p : layout.params()) {
    count += p.numel;
    std::printf("  %-40s [%s]\n", p.name.c_str(),
                fmt::format("{}", fmt::join(p.shape, ", ")).c_str());
  }
  std::printf("  %zu tensors, %ld parameters\n", layout.params().size(), long(count));
  return report_values(SourceWeights(source, layout, 0), layout);
}

// A PEFT adapter folder: its LoRA and its tensors, and the base it goes on (every tensor of
// both checked against the model before anything is printed).
int inspect_adapter(const ModelSource& source) {
  const nn::ParamLayout layout(model_config(source.config));
  const SourceWeights check(source, layout, 0);
  const nn::LoraConfig& lora = layout.config().lora;
  std::printf("PEFT adapter %s on %s (all tensors checked)\n\n", source.adapter.c_str(),
              source.dir.c_str());
  std::printf("lora: rank %d, alpha %g, targets %s\n\ntensors:\n", lora.rank, lora.alpha,
              fmt::format("{}", fmt::join(lora.targets, ", ")).c_str());
  int64_t count = 0, tensors = 0;
  for (const nn::ParamInfo& p : layout.params()) {
    if (!nn::is_adapter(p.role)) continue;
    count += p.numel, ++tensors;
    std::printf("  %-56s [%s]\n", nn::peft_name(p.name).c_str(),
                fmt::format("{}", fmt::join(p.shape, ", ")).c_str());
  }
  std::printf("  %ld tensors, %ld parameters\n", long(tensors), long(count));
  return report_values(check, layout);
}

}  // namespace

int cmd_inspect(const Args& args) {
  po::options_description desc("inspect options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(), kModelSourceHelp);
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::variables_map vm;
  if (!parse_options("inspect", args, desc, vm, &pos)) return 0;
  const fs::path dir = vm["checkpoint"].as<std::string>();
  const ModelSource source = open_model_source(dir, dir.string());
  if (!source.adapter.empty()) return inspect_adapter(source);
  if (!source.checkpoint) return inspect_folder(source);
  const Checkpoint& c = *source.checkpoint;
  std::printf("checkpoint %s (all %zu files verified)\n\nmanifest:\n%s\n\nconfig:\n%s\n",
              c.dir.c_str(), c.manifest.at("files").size(), c.manifest.dump(2).c_str(),
              c.config_yaml.c_str());
  if (!c.state.hosts.empty())
    std::printf("saved by %d rank(s): %s\n\n", c.state.world_size,
                dist::placement(c.state.hosts).c_str());
  // The tensors as the model lays them out in the flat buffer (checked against the files).
  const nn::ParamLayout layout(model_config(source.config));
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
  return report_values(SourceWeights(source, layout, 0), layout);
}

}  // namespace trainer::app
