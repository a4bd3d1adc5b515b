// Hugging Face folders as model sources; see hf_folder.h.
#include "app/hf_folder.h"

#include "app/dropout_keys.h"
#include "app/init_from.h"
#include "app/run_setup.h"
#include "nn/architecture.h"
#include "nn/hf_config.h"
#include "nn/hf_weights.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app {

namespace fs = std::filesystem;

Config with_hf_model(const Config& config, const fs::path& folder, const std::string& what,
                     const std::string& config_name) {
  const nn::ModelConfig hf = nn::hf_model_config(folder / "config.json");
  const nlohmann::json written = nlohmann::json::parse(read_file(folder / "config.json"));
  // What the config states, with config.json's values where it states nothing.
  Config merged = config;
  set_model_keys(merged, hf);
  inherit_dropout(merged, hf.dropout);  // where the config states none
  Config stated = merged;
  for (const char* key : model_keys())
    if (config.stated(key)) stated.set(key, config.value(key));
  const nn::ModelConfig mine = stated_model(stated);
  USAGE_CHECK(mine.arch == hf.arch, "{}: {} describes a {} model but {} states model.arch = {}",
              what, (folder / "config.json").string(), hf.arch, config_name, mine.arch);
  // Compared as Hugging Face would write them: keys that do not change the model (a GPT-2's
  // model.ffn_hidden, a Llama's hidden size given two ways) agree.
  const nlohmann::json want = hf.architecture().hf_config(hf),
                       got = hf.architecture().hf_config(mine);
  for (const auto& [field, value] : want.items())
    USAGE_CHECK(got.at(field) == value,
                "{}: {} has {} = {}{} but {} gives {} (the model keys of a Hugging Face model "
                "come from its config.json: leave them out, or state its values)",
                what, (folder / "config.json").string(), field, value.dump(),
                written.contains(field) ? "" : " (absent: Hugging Face's default)", config_name,
                got.at(field).dump());
  return merged;
}

Config hf_folder_config(const fs::path& folder) {
  Config c;
  if (fs::is_regular_file(folder / "trainer_config.yaml"))
    c.merge_yaml(read_file(folder / "trainer_config.yaml"),
                 (folder / "trainer_config.yaml").string());
  return fit_seq_len(
      with_hf_model(c, folder, folder.string(), (folder / "trainer_config.yaml").string()));
}

Config fit_seq_len(Config c) {
  if (!c.stated("data.seq_len") && c.integer("data.seq_len") > c.integer("model.max_seq_len"))
    c.set("data.seq_len", c.integer("model.max_seq_len"));
  return c;
}

bool hf_folder_has_tokenizer(const fs::path& folder) {
  for (const char* file : {"tokenizer.model", "tokenizer.json", "vocab.json", "encoder.json"})
    if (fs::is_regular_file(folder / file)) return true;
  return false;
}

std::unique_ptr<data::Tokenizer> hf_folder_tokenizer(const fs::path& folder) {
  return hf_folder_has_tokenizer(folder) ? std::make_unique<data::Tokenizer>(folder) : nullptr;
}

}  // namespace trainer::app
