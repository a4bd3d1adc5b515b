// `trainer export`: a checkpoint (or a Hugging Face folder) as a standalone folder other tools
// can load, in Hugging Face's layout: the weights (model.safetensors, or shards of at most
// --max-shard-size with model.safetensors.index.json), config.json, the tokenizer and the
// trainer's own config. The mirror of reading such a folder: export, import, export again
// writes the same bytes. A model with LoRA adapters is written merged (W + (alpha/r) B A),
// with the adapters alone in PEFT's layout in adapter/ beside it.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "app/options.h"
#include "app/run_setup.h"
#include "app/saved_model.h"
#include "data/tokenizer.h"
#include "nn/architecture.h"
#include "nn/hf_weights.h"
#include "nn/lora.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"

namespace trainer::app {

namespace {

// The run's dropout rates into config.json's fields (Architecture::hf_dropouts). A rate the
// architecture's config has no field for, or that shares a field with a site of another rate,
// cannot be written: a warning says so.
void write_hf_dropouts(nlohmann::json& hf, const nn::ModelConfig& config) {
  const nn::DropoutRates& r = config.dropout;
  const std::pair<const char*, float nn::DropoutRates::*> sites[] = {
      {"embeddings", &nn::DropoutRates::embedding},
      {"attention probabilities", &nn::DropoutRates::attention},
      {"residual branches", &nn::DropoutRates::residual}};
  const auto& fields = config.architecture().hf_dropouts;
  for (const auto& [name, site_of] : sites) {
    const auto site = site_of;  // a copy: a lambda cannot capture a binding in clang 14
    const auto f = std::find_if(fields.rbegin(), fields.rend(),
                                [&](const nn::HfDropout& d) { return d.site == site; });
    if (f == fields.rend() && r.*site > 0)
      log::warn("export: {}'s config.json has no field for dropout on the {} ({:g}): not written",
                config.arch, name, r.*site);
  }
  for (const nn::HfDropout& d : fields) {
    if (hf.contains(d.field) && hf[d.field] != nn::as_decimal(r.*d.site))
      log::warn("export: config.json's {} is one rate for several sites: {} written, {} lost",
                d.field, nn::as_decimal(r.*d.site), hf[d.field].dump());
    hf[d.field] = nn::as_decimal(r.*d.site);
  }
}

}  // namespace

namespace fs = std::filesystem;

namespace {

// A size as Hugging Face's convert_file_size_to_int reads it: a whole number of bytes, or one
// followed by a unit in any case, GiB, MiB, KiB (powers of 2) or GB, MB, KB (powers of 10),
// where a lowercase final b means bits ("5Gb" is 625000000 bytes).
int64_t parse_size(const std::string& text) {
  std::string upper = text;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  const std::pair<const char*, int64_t> units[] = {
      {"GIB", int64_t(1) << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"GB", 1000000000},
      {"MB", 1000000},           {"KB", 1000},     {"", 1}};
  for (const auto& [unit, scale] : units) {
    const size_t u = std::strlen(unit);
    if (!upper.ends_with(unit)) continue;
    int64_t n = -1;
    const char* end = text.data() + text.size() - u;
    auto [p, e] = std::from_chars(text.data(), end, n);
    if (e != std::errc() || p != end || n < 1 || n > (int64_t(1) << 60) / scale) break;
    const bool bits = u == 2 && text.back() == 'b';
    return bits ? std::max<int64_t>(1, n * scale / 8) : n * scale;
  }
  throw UsageError(fmt::format(
      "export: --max-shard-size '{}' is not a size: a whole number of bytes, or one with a unit "
      "(5GB, 500MB, 64KiB; any case, as Hugging Face reads them)",
      text));
}

DType export_dtype(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "fp16") return DType::f16;
  throw UsageError(fmt::format("export: --dtype must be fp32, bf16 or fp16, got '{}'", name));
}

// The adapters of `layout` (a whole model with LoRA on) in `flat` as PEFT writes an adapter:
// adapter_model.safetensors under PEFT's names and adapter_config.json, for the base model
// `base_model` (train.init_from, where the run named one).
void write_peft_adapter(const fs::path& folder, const nn::ParamLayout& layout, const float* flat,
                        DType dtype, const std::string& base_model) {
  const nn::LoraConfig& lora = layout.config().lora;
  std::vector<const nn::ParamInfo*> adapters;
  for (const nn::ParamInfo& p : layout.params())
    if (nn::is_adapter(p.role)) adapters.push_back(&p);
  std::vector<std::string> modules;  // q_proj, ..., down_proj: the module names PEFT matches
  for (const nn::Adapter& ad : layout.config().architecture().lora_targets)
    if (std::find(lora.targets.begin(), lora.targets.end(), ad.name) != lora.targets.end())
      modules.push_back(nn::peft_module(layout.config(), ad));
  fs::create_directories(folder);
  nn::write_tensors(folder / "adapter_model.safetensors", adapters, flat, dtype,
                    [](const nn::ParamInfo& p) { return nn::peft_name(p.name); });
  const nlohmann::json config = {{"peft_type", "LORA"},
                                 {"task_type", "CAUSAL_LM"},
                                 {"base_model_name_or_path", base_model},
                                 {"r", lora.rank},
                                 {"lora_alpha", nn::as_decimal(lora.alpha)},
                                 {"lora_dropout", nn::as_decimal(layout.config().dropout.adapter)},
                                 {"target_modules", modules},
                                 {"bias", "none"},
                                 {"fan_in_fan_out", false},
                                 {"init_lora_weights", true},
                                 {"inference_mode", true},
                                 {"use_rslora", false},
                                 {"use_dora", false},
                                 {"modules_to_save", nullptr},
                                 {"layers_to_transform", nullptr},
                                 {"rank_pattern", nlohmann::json::object()},
                                 {"alpha_pattern", nlohmann::json::object()}};
  write_file_atomic(folder / "adapter_config.json", config.dump(2) + "\n");
  for (const auto& e : fs::directory_iterator(folder)) fsync_path(e.path());
  fsync_path(folder);
}

}  // namespace

int cmd_export(const Args& args) {
  po::options_description desc("export options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(), kModelSourceHelp)(
      "out", po::value<std::string>()->required(), "output folder (created; must not exist)")(
      "tokenizer", po::value<std::string>(),
      "tokenizer (default: the checkpoint's or folder's own)")(
      "dtype", po::value<std::string>()->default_value("fp32"),
      "weights as fp32 (the master weights), bf16 or fp16 (rounded to nearest even)")(
      "max-shard-size", po::value<std::string>()->default_value("5GB"),
      "largest weights file; a larger model is cut into shards with an index");
  po::variables_map vm;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  if (!parse_options("export", args, desc, vm, &pos)) return 0;
  const DType dtype = export_dtype(vm["dtype"].as<std::string>());
  const int64_t max_shard = parse_size(vm["max-shard-size"].as<std::string>());
  SavedModel saved = open_saved_model(vm["checkpoint"].as<std::string>(), 1, 1);
  const TokenizerBytes tokenizer =
      tokenizer_of(saved, vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "");
  fs::path out = fs::path(vm["out"].as<std::string>()).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "exp/" names the folder exp
  CHECK(!fs::exists(out), "{} already exists", out.string());
  const fs::path tmp = out.string() + ".tmp";
  fs::remove_all(tmp);  // litter of an earlier run that was killed
  fs::create_directories(tmp);
  RemoveUnlessKept guard(tmp);
  nn::Model& model = *saved.model;
  const float* masters = model.params().as<float>();  // on the host (open_saved_model)
  const nn::ModelConfig& config = saved.model->config();
  std::string config_yaml = saved.config_yaml;
  // With adapters: the base with them merged, and the adapters alone.
  const nn::ParamLayout base(config.base());
  std::vector<float> merged;
  if (config.lora.on()) {
    merged.resize(size_t(base.total()));
    nn::merge_adapters(model.layout(), masters, base, merged.data());
    masters = merged.data();
    write_peft_adapter(tmp / "adapter", model.layout(), model.params().as<float>(), dtype,
                       saved.config.text("train.init_from"));
    Config merged_config = saved.config;  // the folder holds the merged model, no adapters
    nn::LoraConfig merged_in = config.lora;
    merged_in.rank = 0;
    set_lora_keys(merged_config, merged_in);
    merged_config.set("train.lora.dropout", 0.0);
    if (!config_yaml.empty()) config_yaml = merged_config.to_yaml();  // (a run's, not a folder's)
  }
  const std::vector<std::string> weights =
      nn::write_hf_weights(tmp, base, masters, dtype, max_shard);
  write_file_atomic(tmp / data::tokenizer_file_name(tokenizer.bytes), tokenizer.bytes);
  nlohmann::json hf = config.architecture().hf_config(config.base());
  write_hf_dropouts(hf, config);
  hf["torch_dtype"] = dtype == DType::bf16  ? "bfloat16"
                      : dtype == DType::f16 ? "float16"
                                            : "float32";
  hf["trainer_step"] = saved.step;
  write_file_atomic(tmp / "config.json", hf.dump(2) + "\n");
  if (!config_yaml.empty()) write_file_atomic(tmp / "trainer_config.yaml", config_yaml);
  for (const auto& e : fs::directory_iterator(tmp)) fsync_path(e.path());  // the copies too
  fsync_path(tmp);
  fs::rename(tmp, out);
  guard.keep();
  log::info("exported {} (step {}) to {} ({} weights file{})", saved.name(), saved.step,
            out.string(), weights.size(), weights.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace trainer::app
