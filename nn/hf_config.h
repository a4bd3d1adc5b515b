// Hugging Face's config.json as a source of a model's shape. Each architecture's record reads
// the fields it knows (with Hugging Face's default where one is absent) and checks those that
// must hold a value the trainer computes; whatever is left unread is refused, so a field that
// would change the model is never silently ignored (Note [Unread fields]).
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "nn/model_config.h"

namespace trainer::nn {

// One config.json being read. Every accessor throws a UsageError naming the file and the field
// when the value has the wrong type or is out of what the trainer supports.
class HfConfigReader {
 public:
  HfConfigReader(nlohmann::json config, std::filesystem::path file);

  // The field's value, or `fallback` when it is absent or null (none: the field is required).
  int64_t integer(const char* field, std::optional<int64_t> fallback = std::nullopt);
  double real(const char* field, std::optional<double> fallback = std::nullopt);
  bool boolean(const char* field, bool fallback);
  std::string text(const char* field, std::optional<std::string> fallback = std::nullopt);
  // The field's object, or null when it is absent or null; anything else is refused.
  const nlohmann::json* object(const char* field);
  // Whether the field is present and null (where that differs from absent: a default).
  bool is_null(const char* field) const;
  // The field, or Hugging Face's default for it when absent (null: none), must be null or
  // equal one of `allowed`; `what` says what the trainer computes (for the message).
  void expect(const char* field, const nlohmann::json& hf_default,
              std::initializer_list<nlohmann::json> allowed, const char* what);
  // Fields with no bearing on what the trainer computes (ids of special tokens, initialisation,
  // bookkeeping of other tools).
  void ignore(std::initializer_list<const char*> fields);
  // A dropout probability, in [0, 1) (`fallback` when absent or null).
  float dropout(const char* field, double fallback);
  // Throws naming the first field nothing read.
  void finish() const;

  const std::filesystem::path& file() const { return file_; }

 private:
  const nlohmann::json* take(const char* field);
  // v, unless it lies beyond a float's range (refused naming the field).
  double in_float_range(double v, const char* field) const;
  [[noreturn]] void refuse(const char* field, const std::string& why) const;
  nlohmann::json config_;
  std::filesystem::path file_;
  std::set<std::string> read_;
};

// The GELU form the activation `field` names ("gelu_new" or "gelu_pytorch_tanh": the tanh
// form; "gelu": the exact one), `fallback` when absent; another activation is refused.
GeluForm hf_gelu(HfConfigReader& hf, const char* field, const char* fallback);

// The rotary scaling of the config's "rope_scaling" into m (absent, null or of type "default":
// none): "linear" with its factor, "llama3" with its factor, low_freq_factor, high_freq_factor
// and original_max_position_embeddings, or "yarn" with what transformers reads of it (m's
// max_seq_len, read before, standing in for the original context it leaves out). Another type,
// or a key the type does not have, is refused by name.
void hf_rope_scaling(HfConfigReader& hf, ModelConfig& m);
// The "rope_scaling" Hugging Face writes for m's scaling (null for none).
nlohmann::json hf_rope_scaling_json(const ModelConfig& m);

// The model a Hugging Face folder's config.json describes (whole: no tensor slice), its
// architecture found by the record whose class is named in "architectures" (else by
// "model_type"). Throws a UsageError naming the file and field for a missing or malformed
// file, an architecture the trainer does not have, or a field it does not support.
ModelConfig hf_model_config(const std::filesystem::path& config_json);

}  // namespace trainer::nn
