#include "app/saved_model.h"

#include "app/run_setup.h"
#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app {

namespace fs = std::filesystem;

TokenizerBytes tokenizer_of(const SavedModel& saved, const std::string& requested) {
  const Checkpoint& c = saved.checkpoint;
  if (requested.empty() && !c.tokenizer.empty())  // verified by open_checkpoint
    return {c.tokenizer, std::string(c.bytes(c.tokenizer.filename().string()))};
  const fs::path path =
      !requested.empty() ? fs::path(requested) : fs::path(saved.config.text("data.tokenizer"));
  CHECK(fs::is_regular_file(path), "tokenizer {} not found (pass --tokenizer)", path.string());
  TokenizerBytes t{path, read_file(path)};
  CHECK(data::tokenizer_is(t.bytes, c.state.tokenizer_hash),
        "tokenizer {} (hash {:016x}) is not the one checkpoint {} was trained with ({:016x})",
        path.string(), data::tokenizer_hash(t.bytes), c.dir.string(), c.state.tokenizer_hash);
  return t;
}

SavedModel open_saved_model(const fs::path& dir, int rows, int seq_len) {
  SavedModel s{open_checkpoint_of(dir), Config(), nullptr};
  s.config.merge_yaml(s.checkpoint.config_yaml, (s.checkpoint.dir / "config.yaml").string());
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
