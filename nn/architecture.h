// An architecture is one record: its name, its specification (parameters and activations at a
// model's shape), its own checks of a configuration, its block's forward and backward, and its
// Hugging Face config. Each architecture's file defines its record at its end; one list
// (architecture.cpp) names them all, and everything else (config parsing, the schema's
// choices, export, workspace sizing, the FLOPs count, the tests) walks the list or the record.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/arch.h"
#include "nn/block.h"
#include "nn/hf_config.h"
#include "nn/model_config.h"

namespace trainer::nn {

// Another Hugging Face class that computes one of the trainer's architectures (Mistral's is a
// Llama): its names and its config.json reader. Export writes the record's own class.
struct HfAlias {
  const char* hf_class;
  const char* hf_model_type;
  ModelConfig (*from_hf)(HfConfigReader& config);
};

// A config.json field holding a dropout probability, a site it sets (Note [Dropout] in
// nn/dropout.h) and Hugging Face's default where it is absent. A field may set several sites
// (an entry each); export then writes the last one's rate, and warns if they differ.
struct HfDropout {
  const char* field;
  float DropoutRates::*site;
  double hf_default;
};

struct Architecture {
  const char* name;     // the value of model.arch
  const char* summary;  // a phrase for the schema and --help: what sets it apart
  // Parameters, activations and products of `model` (already checked by `validate`).
  ArchSpec (*spec)(const ModelConfig& model);
  // Throws UsageError naming the key when `model` asks for what this architecture lacks;
  // ModelConfig::validate has checked the keys every architecture shares.
  void (*validate)(const ModelConfig& model);
  void (*block_forward)(const Context& ctx, const BlockTensors& t, BlockPass pass);
  void (*block_backward)(const Context& ctx, const BlockTensors& t);
  // Hugging Face's names: the model class and model_type of its config.json.
  const char* hf_class;
  const char* hf_model_type;
  // Hugging Face's config.json for `model` (model_type, architectures and the shape keys).
  nlohmann::json (*hf_config)(const ModelConfig& model);
  // The inverse: the model a config.json describes (the reader refuses what is left unread).
  ModelConfig (*from_hf)(HfConfigReader& config);
  // What a Hugging Face weights file may hold beside the parameters' names: a prefix before
  // every name (the base model's attribute, e.g. "transformer."), and tensors that are not
  // parameters, by the end of their names (buffers such as a causal mask, a tied head's copy).
  const char* hf_file_prefix;
  std::vector<const char*> hf_extra_tensors;
  // Its config.json's dropout probabilities: read into ModelConfig::dropout, written by export.
  std::vector<HfDropout> hf_dropouts;
  // Other classes read as this architecture.
  std::vector<HfAlias> hf_also{};
  // The block products LoRA may adapt (train.lora.targets' choices); none: LoRA is refused.
  std::vector<Adapter> lora_targets{};
};

// Every architecture, in the order the schema lists them.
const std::vector<const Architecture*>& architectures();
// Their names.
std::vector<std::string> architecture_names();
// The architecture called `name`; throws UsageError listing the names otherwise.
const Architecture& find_architecture(const std::string& name);

}  // namespace trainer::nn
