// `trainer export`: a checkpoint as a standalone folder other tools can load: weights
// (safetensors, with the architecture's Hugging Face names and row order), its Hugging Face
// config.json, the tokenizer and the trainer's own config.
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/options.h"
#include "app/saved_model.h"
#include "nn/architecture.h"
#include "nn/model_io.h"
#include "nn/ops/cast.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"
#include "runtime/memory.h"

namespace trainer::app {

namespace fs = std::filesystem;

int cmd_export(const Args& args) {
  po::options_description desc("export options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(),
                     "checkpoint directory, or a run directory (its latest); also positional")(
      "out", po::value<std::string>()->required(), "output folder (created; must not exist)")(
      "tokenizer", po::value<std::string>(), "SentencePiece model (default: the checkpoint's own)")(
      "dtype", po::value<std::string>()->default_value("fp32"),
      "weights as fp32 (the master weights) or bf16 (rounded to nearest even)");
  po::variables_map vm;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  if (!parse_options("export", args, desc, vm, &pos)) return 0;
  const std::string dtype = vm["dtype"].as<std::string>();
  if (dtype != "fp32" && dtype != "bf16")
    throw UsageError(fmt::format("export: --dtype must be fp32 or bf16, got '{}'", dtype));
  SavedModel saved = open_saved_model(vm["checkpoint"].as<std::string>(), 1, 1);
  fs::path out = fs::path(vm["out"].as<std::string>()).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "exp/" names the folder exp
  CHECK(!fs::exists(out), "{} already exists", out.string());
  const fs::path tmp = out.string() + ".tmp";
  fs::remove_all(tmp);  // litter of an earlier run that was killed
  fs::create_directories(tmp);
  RemoveUnlessKept guard(tmp);
  {
    // From the loaded masters: whole or sharded checkpoints alike.
    nn::Model& model = *saved.model;
    const Tensor masters = model.params();
    std::vector<float> host = read_as_f32(model.context(), masters);
    nn::to_hf_order(model.layout(), host.data());
    std::vector<bf16> rounded;
    const void* values = host.data();
    if (dtype == "bf16") {
      rounded.resize(host.size());
      nn::cast(model.context(), make_tensor(rounded.data(), DType::bf16, {masters.numel()}),
               make_tensor(host.data(), DType::f32, {masters.numel()}));
      values = rounded.data();
    }
    SafetensorsWriter w;
    nn::add_params(w, model.layout(), values, dtype == "bf16" ? DType::bf16 : DType::f32);
    w.set_metadata("format", "pt");
    w.write(tmp / "model.safetensors");
  }
  const TokenizerBytes tokenizer =
      tokenizer_of(saved, vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "");
  write_file_atomic(tmp / "tokenizer.model", tokenizer.bytes);
  const nn::ModelConfig& config = saved.model->config();
  nlohmann::json hf = config.architecture().hf_config(config);
  hf["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  hf["trainer_step"] = saved.checkpoint.state.step;
  write_file_atomic(tmp / "config.json", hf.dump(2) + "\n");
  write_file_atomic(tmp / "trainer_config.yaml", saved.checkpoint.config_yaml);
  for (const auto& e : fs::directory_iterator(tmp)) fsync_path(e.path());  // the copies too
  fsync_path(tmp);
  fs::rename(tmp, out);
  guard.keep();
  log::info("exported {} (step {}) to {}", saved.checkpoint.dir.string(),
            saved.checkpoint.state.step, out.string());
  return 0;
}

}  // namespace trainer::app
