// Fine-tuning from saved weights; see init_from.h.
#include "app/init_from.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "app/run_setup.h"
#include "data/tokenizer.h"
#include "nn/architecture.h"
#include "nn/hf_weights.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

// Whether `a` and `b` are one model, compared as Hugging Face would write them: keys that do
// not change the model (a SwiGLU width given two ways) agree.
bool same_model(const nn::ModelConfig& a, const nn::ModelConfig& b) {
  return a.arch == b.arch && a.architecture().hf_config(a) == b.architecture().hf_config(b);
}

}  // namespace

InitSource open_init_source(const fs::path& from, const Config& run_config,
                            const nn::ParamLayout& layout, uint64_t tokenizer_hash, uint64_t seed) {
  const std::string what = fmt::format("train.init_from = {}", from.string());
  InitSource s{open_model_source(from, what), nullptr};
  // A folder's model keys are the run's already (run_training applied them: with_hf_model); a
  // checkpoint's other model is named by the first key that differs.
  if (s.source.checkpoint && !same_model(stated_model(s.source.config), stated_model(run_config)))
    for (const char* key : model_keys())
      if (s.source.config.to_yaml_value(key) != run_config.to_yaml_value(key))
        throw UsageError(fmt::format(
            "{}: {} is {} there but {} here (another model: fine-tuning needs the same one)", what,
            key, s.source.config.to_yaml_value(key), run_config.to_yaml_value(key)));
  s.weights = std::make_shared<const SourceWeights>(s.source, layout, seed);
  // The ids of the data must mean the pieces the weights learnt.
  const std::optional<TokenizerBytes> own = s.source.own_tokenizer();
  USAGE_CHECK(own,
              "{} holds no tokenizer to check against data.tokenizer (a folder: copy the model's "
              "tokenizer.json or tokenizer.model into it)",
              what);
  USAGE_CHECK(data::tokenizer_is(own->bytes, tokenizer_hash),
              "{} comes with another tokenizer ({:016x}; data.tokenizer is {:016x}): its token ids "
              "would mean other pieces",
              what, data::tokenizer_hash(own->bytes), tokenizer_hash);
  return s;
}

void load_init_weights(const InitSource& source, const nn::Model& model, dist::DataParallel& dp,
                       dist::Communicator& comm) {
  // Each rank reads its own slices: a refusal is noted, not thrown, so that every rank still
  // reaches set_masters' collective and then the agreement below.
  std::string refused;
  dist::set_masters(dp, model, [&](const nn::ParamInfo& p, int64_t b, int64_t e, float* out) {
    try {
      if (refused.empty()) return source.weights->read(p, b, e, out);
    } catch (const UsageError& x) {
      refused = x.what();
    }
    std::fill(out, out + (e - b), 0.0f);
  });
  std::vector<double> bad(size_t(comm.size()), 0.0);
  bad[size_t(comm.rank())] = refused.empty() ? 0.0 : 1.0;
  if (comm.size() > 1) comm.all_reduce(bad);
  const auto first = std::find(bad.begin(), bad.end(), 1.0);
  if (first == bad.end()) return;
  const int rank = int(first - bad.begin());
  int64_t n = int64_t(refused.size());  // the first refusing rank's message, to every rank
  comm.broadcast(&n, sizeof n, rank);
  refused.resize(size_t(n));
  comm.broadcast(refused.data(), n, rank);
  throw UsageError(refused);
}

}  // namespace trainer::app
