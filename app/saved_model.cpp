#include "app/saved_model.h"

#include "app/hf_folder.h"
#include "app/run_setup.h"
#include "app/source_weights.h"
#include "data/tokenizer.h"
#include "nn/hf_weights.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

// The tokenizer a checkpoint holds (verified with it), or `requested` or the run's
// data.tokenizer (for checkpoints written before they held one), checked against the hash the
// checkpoint records.
TokenizerBytes checkpoint_tokenizer(const SavedModel& saved, const std::string& requested) {
  const std::optional<TokenizerBytes> own = saved.own_tokenizer();
  if (requested.empty() && own) return *own;
  const Checkpoint& c = *saved.checkpoint;
  const fs::path path =
      !requested.empty() ? fs::path(requested) : fs::path(saved.config.text("data.tokenizer"));
  USAGE_CHECK(fs::exists(path), "tokenizer {} not found (pass --tokenizer)", path.string());
  const data::Tokenizer t(path);
  USAGE_CHECK(data::tokenizer_is(t.bytes(), c.state.tokenizer_hash),
              "tokenizer {} (hash {:016x}) is not the one checkpoint {} was trained with ({:016x})",
              path.string(), t.hash(), c.dir.string(), c.state.tokenizer_hash);
  return {path, t.bytes()};
}

// The tokenizer a folder holds, or `requested` (the same one, where it holds one); refused
// when it has more tokens than the model (a published model's vocabulary covers its
// tokenizer's; a checkpoint's tokenizer is the one it trained with, whatever its size).
TokenizerBytes folder_tokenizer(const SavedModel& saved, const std::string& requested) {
  const std::optional<TokenizerBytes> own = saved.own_tokenizer();
  TokenizerBytes t;
  if (requested.empty()) {
    USAGE_CHECK(own,
                "{} holds no tokenizer (tokenizer.model, tokenizer.json or vocab.json + "
                "merges.txt): pass --tokenizer",
                saved.dir.string());
    t = *own;
  } else {
    const data::Tokenizer mine(requested);
    USAGE_CHECK(!own || data::tokenizer_is(own->bytes, mine.hash()),
                "tokenizer {} (hash {:016x}) is not the one {} holds ({:016x})", requested,
                mine.hash(), saved.dir.string(), own ? data::tokenizer_hash(own->bytes) : 0);
    t = {requested, mine.bytes()};
  }
  const int vocab = data::Tokenizer(t.bytes, t.from).vocab_size();
  USAGE_CHECK(vocab <= saved.model->config().vocab_size,
              "tokenizer {} has {} tokens but the model in {} has a vocabulary of {}: another "
              "model's tokenizer?",
              t.from.string(), vocab, saved.dir.string(), saved.model->config().vocab_size);
  return t;
}

}  // namespace

TokenizerBytes tokenizer_of(const SavedModel& saved, const std::string& requested) {
  return saved.checkpoint ? checkpoint_tokenizer(saved, requested)
                          : folder_tokenizer(saved, requested);
}

int32_t document_start(const SavedModel& saved, const data::Tokenizer& tok) {
  const bool published = saved.config_yaml.empty();
  return published && tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id();
}

SavedModel open_saved_model(const fs::path& dir, int rows, int seq_len) {
  SavedModel s{open_model_source(dir, dir.string())};
  const nn::ModelConfig mc = model_config(s.config);
  if (rows <= 0) rows = model_rows(loader_config(s.config, "val"));
  if (seq_len <= 0) seq_len = int(s.config.integer("data.seq_len"));
  nn::ExecConfig exec = exec_config(s.config, rows, std::min(seq_len, mc.max_seq_len));
  exec.training = false;
  exec.device = Device::cpu;  // eval, sample and export run here, wherever the run trained
  exec.cuda_graphs = false;   // as the run's train.cuda_graphs may have asked on its GPU
  exec.recompute = nn::Recompute::full;  // forward only: keep nothing per block
  exec.recompute_layers.clear();
  s.model = std::make_unique<nn::Transformer>(mc, exec);
  SourceWeights(s, s.model->layout(), s.config.integer("run.seed")).load(*s.model);
  return s;
}

}  // namespace trainer::app
