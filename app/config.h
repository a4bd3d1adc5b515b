// The run configuration: one schema (key, type, default, one-line doc) in one place, a YAML
// file on top of the defaults, then `--set key=value` overrides. Unknown keys, wrong types and
// out-of-range values are UsageErrors naming the key, the value and the line.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace trainer::app {

enum class Kind { integer, real, boolean, text, list };

using Value = std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;

struct KeySpec {
  std::string key;  // "optimizer.lr"
  Kind kind;
  Value default_value;
  std::string doc;
  double min = -1e300, max = 1e300;         // numeric range, inclusive unless open below
  std::vector<std::string> choices{};       // allowed text values, when non-empty
  bool min_open = false, max_open = false;  // the range excludes min, max (the formula needs it)
};

// A numeric key's domain as an interval: "[0, 1)", "(0, 1]", "[1, inf)".
std::string domain_of(const KeySpec& spec);

// Every key the trainer understands.
const std::vector<KeySpec>& schema();

class Config {
 public:
  // The defaults of every key.
  Config();
  // Defaults, then the YAML file (if non-empty), then each "key=value" override in order.
  static Config load(const std::string& yaml_path, const std::vector<std::string>& overrides);
  // Parses YAML text (file name used in messages) on top of this config.
  void merge_yaml(const std::string& text, const std::string& source);
  // Applies one "key=value" override (the value is parsed as YAML).
  void apply_override(const std::string& assignment);

  int64_t integer(const std::string& key) const;
  double real(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const std::string& text(const std::string& key) const;
  const std::vector<std::string>& list(const std::string& key) const;
  void set(const std::string& key, Value v);
  // Whether a YAML, an override or set() gave `key` a value (else it holds its default).
  bool stated(const std::string& key) const { return stated_.contains(key); }
  // A key's value, whatever its type.
  const Value& value(const std::string& key) const { return values_.at(key); }

  // One key's value as it appears in the resolved YAML.
  std::string to_yaml_value(const std::string& key) const;
  // The resolved config as YAML (every key, nested by section).
  std::string to_yaml() const;
  // A stable hash of the resolved values (ranks compare it at start-up).
  uint64_t digest() const;

 private:
  const Value& get(const std::string& key, Kind kind) const;
  std::map<std::string, Value> values_;
  std::set<std::string> stated_;
};

// The reference of every key as Markdown (docs/config.md is generated from it).
std::string schema_markdown();

}  // namespace trainer::app
