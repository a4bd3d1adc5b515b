#include "app/saved_model.h"

#include "app/run_setup.h"
#include "runtime/error.h"

namespace trainer::app {

SavedModel open_saved_model(const fs::path& dir, int rows, int seq_len) {
  fs::path step_dir = dir;
  if (!fs::exists(dir / "manifest.json")) {
    fs::path latest = latest_checkpoint(dir);
    CHECK(!latest.empty(), "{} is neither a checkpoint nor a run directory with checkpoints",
          dir.string());
    step_dir = latest;
  }
  SavedModel s{open_checkpoint(step_dir), Config(), nullptr};
  s.config.merge_yaml(s.checkpoint.config_yaml, (step_dir / "config.yaml").string());
  const nn::ModelConfig mc = model_config(s.config);
  if (rows <= 0) rows = model_rows(loader_config(s.config, "val"));
  if (seq_len <= 0) seq_len = int(s.config.integer("data.seq_len"));
  nn::ExecConfig exec = exec_config(s.config, rows, std::min(seq_len, mc.max_seq_len));
  exec.training = false;
  exec.recompute = nn::Recompute::full;  // forward only: keep nothing per block
  exec.recompute_layers.clear();
  s.model = std::make_unique<nn::Transformer>(mc, exec);
  load_checkpoint(s.checkpoint, *s.model, nullptr);
  return s;
}

}  // namespace trainer::app
