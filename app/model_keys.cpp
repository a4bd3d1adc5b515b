#include "app/model_keys.h"

#include <string>

#include "app/dropout_keys.h"
#include "nn/lora.h"

namespace trainer::app {

nn::ModelConfig model_config(const Config& c) {
  const nn::ModelConfig m = stated_model(c);
  m.validate();
  return m;
}

namespace {

// Note [Model keys]
// The keys that define a model's parameters and what they compute, each with its field of
// nn::ModelConfig: the one list that reading a model from a config, writing one into a config
// (a Hugging Face folder's), and comparing two (fine-tuning, resuming, inspecting) go through.
// The schema (config_schema.cpp) gives each its type, default and range.
struct ModelKey {
  const char* key;
  void (*read)(const Config& c, const char* key, nn::ModelConfig& m);
  void (*write)(Config& c, const char* key, const nn::ModelConfig& m);
};

// An integer key's ModelKey.
template <int nn::ModelConfig::*field>
ModelKey int_key(const char* key) {
  return {key,
          [](const Config& c, const char* k, nn::ModelConfig& m) { m.*field = int(c.integer(k)); },
          [](Config& c, const char* k, const nn::ModelConfig& m) { c.set(k, int64_t(m.*field)); }};
}

// A float key's ModelKey, written as the float's shortest decimal form.
template <float nn::ModelConfig::*field>
ModelKey float_key(const char* key) {
  return {key,
          [](const Config& c, const char* k, nn::ModelConfig& m) { m.*field = float(c.real(k)); },
          [](Config& c, const char* k, const nn::ModelConfig& m) {
            c.set(k, nn::as_decimal(m.*field));
          }};
}

const ModelKey kModelKeys[] = {
    {"model.arch", [](const Config& c, const char* k, nn::ModelConfig& m) { m.arch = c.text(k); },
     [](Config& c, const char* k, const nn::ModelConfig& m) { c.set(k, m.arch); }},
    int_key<&nn::ModelConfig::vocab_size>("model.vocab_size"),
    int_key<&nn::ModelConfig::max_seq_len>("model.max_seq_len"),
    int_key<&nn::ModelConfig::n_layer>("model.n_layer"),
    int_key<&nn::ModelConfig::n_head>("model.n_head"),
    int_key<&nn::ModelConfig::n_embd>("model.n_embd"),
    int_key<&nn::ModelConfig::n_kv_head>("model.n_kv_head"),
    int_key<&nn::ModelConfig::ffn_hidden>("model.ffn_hidden"),
    int_key<&nn::ModelConfig::ffn_multiple_of>("model.ffn_multiple_of"),
    int_key<&nn::ModelConfig::head_dim>("model.head_dim"),
    float_key<&nn::ModelConfig::rope_theta>("model.rope_theta"),
    {"model.rope_scaling",
     [](const Config& c, const char* k, nn::ModelConfig& m) {
       m.rope_scaling = nn::kRopeScalingNames.parse(c.text(k));
     },
     [](Config& c, const char* k, const nn::ModelConfig& m) {
       c.set(k, std::string(nn::kRopeScalingNames.name(m.rope_scaling)));
     }},
    float_key<&nn::ModelConfig::rope_factor>("model.rope_scaling_factor"),
    float_key<&nn::ModelConfig::rope_low_freq_factor>("model.rope_low_freq_factor"),
    float_key<&nn::ModelConfig::rope_high_freq_factor>("model.rope_high_freq_factor"),
    int_key<&nn::ModelConfig::rope_original_context>("model.rope_original_context"),
    float_key<&nn::ModelConfig::rope_beta_fast>("model.rope_beta_fast"),
    float_key<&nn::ModelConfig::rope_beta_slow>("model.rope_beta_slow"),
    float_key<&nn::ModelConfig::rope_attention_factor>("model.rope_attention_factor"),
    {"model.rope_truncate",
     [](const Config& c, const char* k, nn::ModelConfig& m) { m.rope_truncate = c.boolean(k); },
     [](Config& c, const char* k, const nn::ModelConfig& m) { c.set(k, m.rope_truncate); }},
    float_key<&nn::ModelConfig::norm_eps>("model.norm_eps"),
    {"model.rotary_pct",
     [](const Config& c, const char* k, nn::ModelConfig& m) { m.rotary_pct = c.real(k); },
     [](Config& c, const char* k, const nn::ModelConfig& m) { c.set(k, m.rotary_pct); }},
    {"model.tie_embeddings",
     [](const Config& c, const char* k, nn::ModelConfig& m) { m.tie_embeddings = c.boolean(k); },
     [](Config& c, const char* k, const nn::ModelConfig& m) { c.set(k, m.tie_embeddings); }},
    {"model.gelu",
     [](const Config& c, const char* k, nn::ModelConfig& m) {
       m.gelu = nn::kGeluNames.parse(c.text(k));
     },
     [](Config& c, const char* k, const nn::ModelConfig& m) {
       c.set(k, std::string(nn::kGeluNames.name(m.gelu)));
     }},
};

}  // namespace

const std::vector<const char*>& model_keys() {
  static const std::vector<const char*> keys = [] {
    std::vector<const char*> out;
    for (const ModelKey& k : kModelKeys) out.push_back(k.key);
    return out;
  }();
  return keys;
}

const std::vector<const char*>& lora_keys() {
  static const std::vector<const char*> keys = {"train.lora.rank", "train.lora.alpha",
                                                "train.lora.targets"};
  return keys;
}

void set_lora_keys(Config& c, const nn::LoraConfig& lora) {
  c.set("train.lora.rank", int64_t(lora.rank));
  c.set("train.lora.alpha", double(lora.alpha));
  c.set("train.lora.targets", lora.targets);
}

nn::ModelConfig stated_model(const Config& c) {
  nn::ModelConfig m;
  for (const ModelKey& k : kModelKeys) k.read(c, k.key, m);
  m.dropout = dropout_rates(c);
  m.lora.rank = int(c.integer("train.lora.rank"));
  m.lora.alpha = float(c.real("train.lora.alpha"));
  m.lora.targets = c.list("train.lora.targets");
  return m;
}

void set_model_keys(Config& c, const nn::ModelConfig& m) {
  for (const ModelKey& k : kModelKeys) k.write(c, k.key, m);
}

}  // namespace trainer::app
