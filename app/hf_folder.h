// Hugging Face model folders (config.json, safetensors weights, a tokenizer) as the source of a
// model: the run's model keys come from config.json, so a user need not restate them.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "app/config.h"
#include "data/tokenizer.h"
#include "nn/model.h"

namespace trainer::app {

// `config` with its model keys set from `folder`'s config.json (`what` names the source in
// messages). A key the config states (a YAML or --set gave it) is kept only where it describes
// the same model; one that gives another model is refused with a UsageError naming the
// config.json field and both values, and `config_name`, where `config` comes from.
Config with_hf_model(const Config& config, const std::filesystem::path& folder,
                     const std::string& what, const std::string& config_name = "the run's config");

// The run config a folder implies on its own: its trainer_config.yaml when `trainer export`
// wrote it (else the defaults), with the model keys of its config.json, fit_seq_len.
Config hf_folder_config(const std::filesystem::path& folder);

// `c` with data.seq_len, unless stated, cut to the model's positions (the default, 256, is
// longer than some models').
Config fit_seq_len(Config c);

// Whether a folder holds a tokenizer's files (tokenizer.model, tokenizer.json, vocab.json or
// encoder.json), and the tokenizer they make (null when it holds none).
bool hf_folder_has_tokenizer(const std::filesystem::path& folder);
std::unique_ptr<data::Tokenizer> hf_folder_tokenizer(const std::filesystem::path& folder);

}  // namespace trainer::app
