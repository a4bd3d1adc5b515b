// The config keys that describe a model (model.*, and train.lora's adapters): reading a
// nn::ModelConfig from a Config, writing one into it, and the lists that comparing two go
// through (Note [Model keys] in model_keys.cpp).
#pragma once

#include <vector>

#include "app/config.h"
#include "nn/model_config.h"

namespace trainer::app {

// The model the config's model.* keys describe, validated (UsageError naming the key).
nn::ModelConfig model_config(const Config& c);
// The same unvalidated: what the keys state, for comparing with a model from elsewhere.
nn::ModelConfig stated_model(const Config& c);
// Sets every model.* key to describe `m` (the inverse of model_config).
void set_model_keys(Config& c, const nn::ModelConfig& m);
// The keys that define a model's parameters and what they compute (Note [Model keys]).
const std::vector<const char*>& model_keys();
// The train.lora keys that define its adapters (read into nn::ModelConfig::lora too; a
// published folder never states them, so they are not model keys).
const std::vector<const char*>& lora_keys();
// Sets them to describe `lora` (the inverse of stated_model's reading of them).
void set_lora_keys(Config& c, const nn::LoraConfig& lora);

}  // namespace trainer::app
