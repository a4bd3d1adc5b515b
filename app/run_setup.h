// Turns the resolved Config into the structs each layer takes, so that no layer below app/
// knows about YAML keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/config.h"
#include "data/loader.h"
#include "nn/adamw.h"
#include "nn/lr_schedule.h"
#include "nn/model_config.h"

namespace trainer::app {

nn::ModelConfig model_config(const Config& c);
nn::AdamWConfig adamw_config(const Config& c);
nn::LrSchedule lr_schedule(const Config& c);
data::LoaderConfig loader_config(const Config& c, const std::string& split);
// The rows the model is sized for: batch_size, or the token budget over seq_len (bucket mode).
int model_rows(const data::LoaderConfig& l);

// A "step:value" schedule: the value in force at `step` (the last entry whose step <= it), or
// `fallback` before the first entry. Throws a UsageError naming the key on a malformed entry.
int64_t scheduled_value(const Config& c, const std::string& key, int64_t step, int64_t fallback);

// True when `name` matches one of the glob patterns (only '*' is special).
bool matches_any(const std::string& name, const std::vector<std::string>& patterns);

}  // namespace trainer::app
