#include "app/saved_model.h"

#include "app/run_setup.h"
#include "data/tokenizer.h"
#include "runtime/error.h"

namespace trainer::app {

fs::path tokenizer_of(const SavedModel& saved, const std::string& requested) {
  const fs::path path = !requested.empty() ? fs::path(requested)
                        : !saved.checkpoint.tokenizer.empty()
                            ? saved.checkpoint.tokenizer
                            : fs::path(saved.config.text("data.tokenizer"));
  CHECK(fs::is_regular_file(path), "tokenizer {} not found (pass --tokenizer)", path.string());
  const uint64_t hash = data::tokenizer_file_hash(path);
  CHECK(hash == saved.checkpoint.state.tokenizer_hash,
        "tokenizer {} (hash {:016x}) is not the one checkpoint {} was trained with ({:016x})",
        path.string(), hash, saved.checkpoint.dir.string(), saved.checkpoint.state.tokenizer_hash);
  return path;
}

SavedModel open_saved_model(const fs::path& dir, int rows, int seq_len) {
  const fs::path step_dir = checkpoint_dir_of(dir);
  SavedModel s{open_checkpoint(step_dir), Config(), nullptr};
  s.config.merge_yaml(s.checkpoint.config_yaml, (step_dir / "config.yaml").string());
  const nn::ModelConfig mc = model_config(s.config);
  if (rows <= 0) rows = model_rows(loader_config(s.config, "val"));
  if (seq_len <= 0) seq_len = int(s.config.integer("data.seq_len"));
  nn::ExecConfig exec = exec_config(s.config, rows, std::min(seq_len, mc.max_seq_len));
  exec.training = false;
  exec.device = Device::cpu;  // eval, sample and export run here, wherever the run trained
  exec.recompute = nn::Recompute::full;  // forward only: keep nothing per block
  exec.recompute_layers.clear();
  s.model = std::make_unique<nn::Transformer>(mc, exec);
  load_weights(s.checkpoint, *s.model);
  return s;
}

}  // namespace trainer::app
