// The dropout keys (Note [Dropout] in nn/dropout.h): model.dropout and one key per site, and
// train.lora.dropout for the LoRA adapters' input, read into nn::ModelConfig::dropout. They are not
// model keys (they change no parameter), so a run may set its own over a fine-tuning source's
// rates.
#pragma once

#include <vector>

#include "app/config.h"
#include "nn/model_config.h"

namespace trainer::app {

// model.dropout, then each site's key.
const std::vector<const char*>& dropout_keys();
// The rates the keys state: a site's own key, or model.dropout's where it is -1 (UsageError
// for another negative value); the LoRA adapters' input's is train.lora.dropout's.
nn::DropoutRates dropout_rates(const Config& c);
// Fine-tuning: each site's key `c` leaves out takes the source model's rate (a Hugging Face
// folder's, a saved run's), unless `c` states model.dropout, which is then its rate; the
// adapters' rate likewise where `c` has adapters, unless it states train.lora.dropout
// (model.dropout is not its).
void inherit_dropout(Config& c, const nn::DropoutRates& rates);

}  // namespace trainer::app
