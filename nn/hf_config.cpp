// Reading config.json field by field; see hf_config.h.
#include "nn/hf_config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/architecture.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/strict_json.h"

namespace trainer::nn {

namespace fs = std::filesystem;
using nlohmann::json;

HfConfigReader::HfConfigReader(json config, fs::path file)
    : config_(std::move(config)), file_(std::move(file)) {}

void HfConfigReader::refuse(const char* field, const std::string& why) const {
  throw UsageError(fmt::format("{}: field \"{}\" {}", file_.string(), field, why));
}

const json* HfConfigReader::take(const char* field) {
  read_.insert(field);
  const auto it = config_.find(field);
  return it == config_.end() || it->is_null() ? nullptr : &*it;
}

int64_t HfConfigReader::integer(const char* field, std::optional<int64_t> fallback) {
  const json* v = take(field);
  if (!v && fallback) return *fallback;
  if (!v) refuse(field, "is missing");
  if (!v->is_number_integer()) refuse(field, fmt::format("= {} is not an integer", v->dump()));
  const int64_t n = v->get<int64_t>();
  if (n < 0 || n > (int64_t(1) << 30)) refuse(field, fmt::format("= {} is out of range", n));
  return n;
}

double HfConfigReader::real(const char* field, std::optional<double> fallback) {
  const json* v = take(field);
  if (!v && fallback) return *fallback;
  if (!v) refuse(field, "is missing");
  if (!v->is_number()) refuse(field, fmt::format("= {} is not a number", v->dump()));
  return in_float_range(v->get<double>(), field);
}

double HfConfigReader::in_float_range(double v, const char* field) const {
  // Every number read becomes a float key (or a fraction): one beyond a float's range has no
  // meaning, and converting it would be undefined.
  if (!(std::abs(v) <= double(std::numeric_limits<float>::max())))
    refuse(field, fmt::format("= {} is out of range", v));
  return v;
}

bool HfConfigReader::boolean(const char* field, bool fallback) {
  const json* v = take(field);
  if (!v) return fallback;
  if (!v->is_boolean()) refuse(field, fmt::format("= {} is not true or false", v->dump()));
  return v->get<bool>();
}

std::string HfConfigReader::text(const char* field, std::optional<std::string> fallback) {
  const json* v = take(field);
  if (!v && fallback) return *fallback;
  if (!v) refuse(field, "is missing");
  if (!v->is_string()) refuse(field, fmt::format("= {} is not a string", v->dump()));
  return v->get<std::string>();
}

bool HfConfigReader::is_null(const char* field) const {
  const auto it = config_.find(field);
  return it != config_.end() && it->is_null();
}

const json* HfConfigReader::object(const char* field) {
  const json* v = take(field);
  if (v && !v->is_object()) refuse(field, fmt::format("= {} is not an object", v->dump()));
  return v;
}

void HfConfigReader::expect(const char* field, const json& hf_default,
                            std::initializer_list<json> allowed, const char* what) {
  const bool absent = !config_.contains(field);
  const json* present = take(field);
  const json* v = present ? present : absent && !hf_default.is_null() ? &hf_default : nullptr;
  if (!v) return;
  for (const json& a : allowed) {
    const bool numbers = a.is_number() && v->is_number();
    if (numbers ? std::abs(a.get<double>() - v->get<double>()) <= 1e-12 * std::abs(a.get<double>())
                : a == *v)
      return;
  }
  refuse(field, fmt::format("= {}{} is not supported: the trainer computes {}", v->dump(),
                            present ? "" : " (Hugging Face's default, as it is absent)", what));
}

void HfConfigReader::ignore(std::initializer_list<const char*> fields) {
  for (const char* f : fields) read_.insert(f);
}

float HfConfigReader::dropout(const char* field, double fallback) {
  const double p = real(field, fallback);
  if (!(p >= 0 && p < 1)) refuse(field, fmt::format("= {} is not a probability in [0, 1)", p));
  return float(p);
}

// Note [Unread fields]: a field no record reads could be one that changes what the model
// computes (a new scaling, a bias, a window), so it is refused rather than passed over; the
// records list the fields they know to be irrelevant.
void HfConfigReader::finish() const {
  for (const auto& [key, value] : config_.items())
    if (!read_.contains(key))
      refuse(key.c_str(),
             fmt::format("= {} is not one the trainer knows for this architecture (it could "
                         "change the model; remove it if it does not)",
                         value.dump()));
}

GeluForm hf_gelu(HfConfigReader& hf, const char* field, const char* fallback) {
  const std::string name = hf.text(field, fallback);
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return GeluForm::tanh;
  if (name == "gelu") return GeluForm::erf;
  throw UsageError(
      fmt::format("{}: field \"{}\" = \"{}\" is not supported: the trainer "
                  "computes GELU (gelu_new, gelu_pytorch_tanh or gelu)",
                  hf.file().string(), field, name));
}

namespace {

// One rope_scaling object's fields as its type reads them, each read one noted, so that any other
// is refused (it could change the model).
class RopeFields {
 public:
  RopeFields(const json& r, std::string where, std::string type)
      : where(std::move(where)), type(std::move(type)), r_(r) {}

  // The number `key` states; refused where it is absent or not a number.
  double number(const char* key) {
    keys_.push_back(key);
    const auto it = r_.find(key);
    USAGE_CHECK(it != r_.end() && it->is_number(), "{} of type \"{}\" needs a number \"{}\"", where,
                type, key);
    const double v = it->get<double>();
    USAGE_CHECK(std::abs(v) <= double(std::numeric_limits<float>::max()),
                "{}: \"{}\" = {} is out of range", where, key, v);
    return v;
  }
  // The number `key` states, or `fallback` where it is absent or null (or 0, where transformers
  // reads it as `field or fallback`).
  double optional(const char* key, double fallback, bool zero_is_absent = false) {
    if (!stated(key)) {
      keys_.push_back(key);
      return fallback;
    }
    const double v = number(key);
    return zero_is_absent && v == 0 ? fallback : v;
  }
  // Whether `key` is there and not null.
  bool stated(const char* key) const { return r_.contains(key) && !r_.at(key).is_null(); }
  // A boolean `key`, `fallback` where it is absent; null reads as false, as Python's `or` would.
  bool boolean(const char* key, bool fallback) {
    keys_.push_back(key);
    if (!r_.contains(key)) return fallback;
    const json& v = r_.at(key);
    USAGE_CHECK(v.is_boolean() || v.is_null(), "{}: \"{}\" = {} is not true or false", where, key,
                v.dump());
    return v.is_boolean() && v.get<bool>();
  }
  // `v` as a number of positions.
  int context(double v) const {
    USAGE_CHECK(v >= 1 && v <= double(1 << 24) && v == std::floor(v),
                "{}: \"original_max_position_embeddings\" = {} is not a whole number of positions "
                "in [1, 2^24]",
                where, v);
    return int(v);
  }
  // Refuses a field no read has named.
  void refuse_unread() const {
    for (const auto& [key, value] : r_.items())
      USAGE_CHECK(key == "rope_type" || key == "type" ||
                      std::find(keys_.begin(), keys_.end(), key) != keys_.end(),
                  "{}: \"{}\" = {} is not a key the trainer knows for type \"{}\" (it could change "
                  "the model)",
                  where, key, value.dump(), type);
  }

  const std::string where, type;

 private:
  const json& r_;
  std::vector<std::string> keys_;
};

// YaRN as transformers reads it: the original context defaults to max_position_embeddings (m's
// max_seq_len, read before this) and the factor to max_position_embeddings over it; the
// attention factor is the one stated, else DeepSeek's mscale over mscale_all_dim, else (0 here)
// 0.1 ln(factor) + 1; the turns default to 32 and 1; truncate to true.
void read_yarn(RopeFields& f, ModelConfig& m) {
  m.rope_scaling = RopeScaling::yarn;
  m.rope_original_context =
      f.context(f.optional("original_max_position_embeddings", m.max_seq_len, true));
  m.rope_factor = float(f.optional("factor", double(m.max_seq_len) / m.rope_original_context));
  m.rope_beta_fast = float(f.optional("beta_fast", 32, true));
  m.rope_beta_slow = float(f.optional("beta_slow", 1, true));
  const double mscale = f.optional("mscale", 0), mscale_all = f.optional("mscale_all_dim", 0);
  const double derived = mscale != 0 && mscale_all != 0 ? yarn_mscale(m.rope_factor, mscale) /
                                                              yarn_mscale(m.rope_factor, mscale_all)
                                                        : 0;
  const bool stated = f.stated("attention_factor");
  m.rope_attention_factor = float(f.optional("attention_factor", derived));
  USAGE_CHECK(!stated || m.rope_attention_factor > 0,
              "{}: \"attention_factor\" = {} must be positive", f.where, m.rope_attention_factor);
  m.rope_truncate = f.boolean("truncate", true);
}

}  // namespace

void hf_rope_scaling(HfConfigReader& hf, ModelConfig& m) {
  const json* r = hf.object("rope_scaling");
  if (!r) return;
  // transformers names the type "rope_type" ("type" before 4.45).
  const json type_field = r->contains("rope_type") ? r->at("rope_type") : r->value("type", json());
  RopeFields f(*r, fmt::format("{}: field \"rope_scaling\"", hf.file().string()),
               type_field.is_string() ? type_field.get<std::string>() : "default");
  if (f.type == "linear") {
    m.rope_scaling = RopeScaling::linear;
    m.rope_factor = float(f.number("factor"));
  } else if (f.type == "llama3") {
    m.rope_scaling = RopeScaling::llama3;
    m.rope_factor = float(f.number("factor"));
    m.rope_low_freq_factor = float(f.number("low_freq_factor"));
    m.rope_high_freq_factor = float(f.number("high_freq_factor"));
    m.rope_original_context = f.context(f.number("original_max_position_embeddings"));
  } else if (f.type == "yarn") {
    read_yarn(f, m);
  } else {
    USAGE_CHECK(f.type == "default",
                "{}: type \"{}\" is not supported: the trainer scales rotary "
                "frequencies by \"linear\", \"llama3\" or \"yarn\"",
                f.where, f.type);
  }
  f.refuse_unread();
}

json hf_rope_scaling_json(const ModelConfig& m) {
  switch (m.rope_scaling) {
    case RopeScaling::none:
      return nullptr;
    case RopeScaling::linear:
      return {{"rope_type", "linear"}, {"factor", as_decimal(m.rope_factor)}};
    case RopeScaling::llama3:
      return {{"rope_type", "llama3"},
              {"factor", as_decimal(m.rope_factor)},
              {"low_freq_factor", as_decimal(m.rope_low_freq_factor)},
              {"high_freq_factor", as_decimal(m.rope_high_freq_factor)},
              {"original_max_position_embeddings", m.rope_original_context}};
    case RopeScaling::yarn: {
      json j = {{"rope_type", "yarn"},
                {"factor", as_decimal(m.rope_factor)},
                {"original_max_position_embeddings", m.rope_original_context},
                {"beta_fast", as_decimal(m.rope_beta_fast)},
                {"beta_slow", as_decimal(m.rope_beta_slow)}};
      if (m.rope_attention_factor > 0) j["attention_factor"] = as_decimal(m.rope_attention_factor);
      if (!m.rope_truncate) j["truncate"] = false;
      return j;
    }
  }
  return nullptr;
}

namespace {

// The architecture a config.json names, and the reader of its class (the record's own, or an
// alias's).
std::pair<const Architecture*, HfAlias> hf_architecture(const json& j, const fs::path& file) {
  std::vector<std::string> known;
  for (const Architecture* a : architectures()) {
    known.push_back(a->hf_class);
    for (const HfAlias& also : a->hf_also) known.push_back(also.hf_class);
  }
  std::string cls, type;
  if (const auto it = j.find("architectures"); it != j.end())
    USAGE_CHECK(it->is_array() && std::all_of(it->begin(), it->end(),
                                              [](const json& c) { return c.is_string(); }),
                "{}: field \"architectures\" = {} is not a list of class names (Hugging Face "
                "writes [\"GPT2LMHeadModel\"])",
                file.string(), it->dump());
  if (const auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty())
    cls = it->front().is_string() ? it->front().get<std::string>() : it->front().dump();
  if (const auto it = j.find("model_type"); it != j.end() && it->is_string())
    type = it->get<std::string>();
  for (const Architecture* a : architectures()) {
    std::vector<HfAlias> classes = {{a->hf_class, a->hf_model_type, a->from_hf}};
    classes.insert(classes.end(), a->hf_also.begin(), a->hf_also.end());
    for (const HfAlias& c : classes)
      if (cls.empty() ? type == c.hf_model_type : cls == c.hf_class) return {a, c};
  }
  throw UsageError(
      fmt::format("{}: {} is not an architecture the trainer has (it has {})", file.string(),
                  cls.empty() ? fmt::format("model_type \"{}\"", type) : fmt::format("\"{}\"", cls),
                  fmt::join(known, ", ")));
}

}  // namespace

ModelConfig hf_model_config(const fs::path& config_json) {
  USAGE_CHECK(fs::is_regular_file(config_json),
              "{}: no such file (a Hugging Face model folder "
              "holds its config.json)",
              config_json.string());
  const json j = parse_strict_json(read_file(config_json), config_json.string());
  USAGE_CHECK(j.is_object(), "{}: not a JSON object", config_json.string());
  const auto [arch, reader] = hf_architecture(j, config_json);
  HfConfigReader r(j, config_json);
  r.expect("model_type", nullptr, {reader.hf_model_type}, reader.hf_model_type);
  r.expect("architectures", nullptr, {json::array({reader.hf_class})}, reader.hf_class);
  // Ids of special tokens, initialisation, caching, the dtype it was saved in, provenance.
  r.ignore({"bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache",
            "torch_dtype", "dtype", "transformers_version", "_name_or_path", "trainer_step",
            "tokenizer_class", "return_dict", "output_attentions", "output_hidden_states"});
  ModelConfig m = reader.from_hf(r);
  m.arch = arch->name;
  for (const HfDropout& d : arch->hf_dropouts) m.dropout.*d.site = r.dropout(d.field, d.hf_default);
  r.finish();
  try {
    m.validate();  // the shared keys, then the architecture's own (as a config's are checked)
  } catch (const UsageError& e) {
    throw UsageError(
        fmt::format("{}: its fields describe no valid model: {} (its fields read as "
                    "the trainer's model keys)",
                    config_json.string(), e.what()));
  }
  return m;
}

}  // namespace trainer::nn
