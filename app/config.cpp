#include "app/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/ranges.h>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/rng.h"

namespace trainer::app {

namespace {

const KeySpec* find_spec(const std::string& key) {
  for (const KeySpec& s : schema())
    if (s.key == key) return &s;
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(const std::string& key) {
  const KeySpec* best = nullptr;
  size_t best_d = SIZE_MAX;
  for (const KeySpec& s : schema()) {
    size_t d = edit_distance(key, s.key);
    std::string tail = s.key.substr(s.key.find('.') + 1);  // also match a misplaced section
    d = std::min(d, edit_distance(key.substr(key.find('.') + 1), tail) + 1);
    if (d < best_d) best_d = d, best = &s;
  }
  if (best && best_d <= std::max<size_t>(2, key.size() / 3))
    return fmt::format(" (did you mean '{}'?)", best->key);
  return "";
}

std::string format_value(const Value& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::vector<std::string>>)
          return fmt::format("[{}]", fmt::join(v, ", "));
        else
          return fmt::format("{}", v);
      },
      value);
}

[[noreturn]] void usage_error(const std::string& msg) {
  throw UsageError(msg);
}

std::string where(const std::string& source, const YAML::Node& node) {
  if (node.Mark().line < 0) return source;
  return fmt::format("{}:{}", source, node.Mark().line + 1);
}

}  // namespace

std::string domain_of(const KeySpec& spec) {
  auto bound = [](double v) {
    return v >= 1e300    ? std::string("inf")
           : v <= -1e300 ? std::string("-inf")
                         : fmt::format("{}", v);
  };
  return fmt::format("{}{}, {}{}", spec.min_open ? "(" : "[", bound(spec.min), bound(spec.max),
                     spec.max_open || spec.max >= 1e300 ? ")" : "]");
}

namespace {

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::integer:
      return "an integer";
    case Kind::real:
      return "a number";
    case Kind::boolean:
      return "true or false";
    case Kind::text:
      return "a string";
    case Kind::list:
      return "a list of strings";
  }
  return "?";
}

Value parse_value(const KeySpec& spec, const YAML::Node& node, const std::string& at) {
  auto bad = [&](const std::string& shown) -> Value {
    usage_error(fmt::format("{}: {} = {} is not {}", at, spec.key, shown, kind_name(spec.kind)));
  };
  if (node.IsNull()) return bad("an empty value");
  if (spec.kind == Kind::list) {
    if (!node.IsSequence()) return bad(node.IsScalar() ? node.Scalar() : "a mapping");
    std::vector<std::string> items;
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) return bad("a nested value");
      items.push_back(item.Scalar());
    }
    return items;
  }
  if (!node.IsScalar()) return bad(node.IsSequence() ? "a list" : "a mapping");
  const std::string& s = node.Scalar();
  Value v;
  try {
    switch (spec.kind) {
      case Kind::integer:
        v = node.as<int64_t>();
        break;
      case Kind::real:
        v = node.as<double>();
        break;
      case Kind::boolean:
        v = node.as<bool>();
        break;
      default:
        v = s;
        break;
    }
  } catch (const YAML::Exception&) {
    return bad("'" + s + "'");
  }
  if (spec.kind == Kind::integer || spec.kind == Kind::real) {
    double x = spec.kind == Kind::integer ? double(std::get<int64_t>(v)) : std::get<double>(v);
    const bool above = spec.min_open ? x > spec.min : x >= spec.min;
    const bool below = spec.max_open ? x < spec.max : x <= spec.max;
    if (!(above && below))
      usage_error(fmt::format("{}: {} = {} is out of range {}", at, spec.key, s, domain_of(spec)));
  }
  if (!spec.choices.empty() &&
      std::find(spec.choices.begin(), spec.choices.end(), s) == spec.choices.end())
    usage_error(fmt::format("{}: {} = '{}' is not one of {}", at, spec.key, s,
                            fmt::join(spec.choices, ", ")));
  return v;
}

// A few keys of section `key` ("model.n_layer, model.n_head, ..."), or "" when it is not one.
std::string section_keys(const std::string& key) {
  std::vector<std::string> keys;
  for (const KeySpec& s : schema())
    if (s.key.starts_with(key + ".")) keys.push_back(s.key);
  if (keys.size() > 3) {
    keys.resize(3);
    keys.push_back("...");
  }
  return fmt::format("{}", fmt::join(keys, ", "));
}

void merge_node(std::map<std::string, Value>& values, std::set<std::string>& stated,
                const YAML::Node& node, const std::string& prefix, const std::string& source) {
  std::set<std::string> here;  // this mapping's keys: YAML would keep a repeated one's last value
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Copies: the iterator's pair is a proxy, and references into it dangle.
    const YAML::Node name = it->first, child = it->second;
    const std::string key = prefix + name.as<std::string>();
    if (!here.insert(key).second)
      usage_error(fmt::format("{}: '{}' is given twice in one mapping (which value is meant?)",
                              where(source, name), key));
    const KeySpec* spec = find_spec(key);
    if (!spec && child.IsMap()) {
      bool is_section = std::any_of(schema().begin(), schema().end(),
                                    [&](const KeySpec& s) { return s.key.starts_with(key + "."); });
      if (is_section) {
        merge_node(values, stated, child, key + ".", source);
        continue;
      }
    }
    if (!spec && child.IsMap()) {
      // A misspelt section: suggest against the whole dotted keys it holds.
      std::string hint;
      for (auto sub = child.begin(); sub != child.end() && hint.empty(); ++sub) {
        const YAML::Node sub_name = sub->first;
        hint = did_you_mean(key + "." + sub_name.as<std::string>());
      }
      usage_error(fmt::format("{}: unknown section '{}'{}", where(source, name), key, hint));
    }
    if (!spec) {
      if (const std::string keys = section_keys(key); !keys.empty())
        usage_error(fmt::format("{}: '{}' is a section, a mapping of keys ({}), not a value",
                                where(source, name), key, keys));
      usage_error(
          fmt::format("{}: unknown key '{}'{}", where(source, name), key, did_you_mean(key)));
    }
    values[key] = parse_value(*spec, child, where(source, child));
    stated.insert(key);
  }
}

}  // namespace

Config::Config() {
  for (const KeySpec& s : schema()) values_[s.key] = s.default_value;
}

Config Config::load(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  Config c;
  if (!yaml_path.empty()) {
    if (std::filesystem::is_directory(yaml_path))
      usage_error(fmt::format("{}: is a directory, not a config file", yaml_path));
    std::ifstream in(yaml_path, std::ios::binary);
    if (!in) usage_error(fmt::format("cannot read {}: {}", yaml_path, std::strerror(errno)));
    c.merge_yaml(std::string(std::istreambuf_iterator<char>(in), {}), yaml_path);
  }
  for (const std::string& o : overrides) c.apply_override(o);
  return c;
}

void Config::merge_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    usage_error(fmt::format("{}:{}: malformed YAML: {}", source, e.mark.line + 1, e.msg));
  }
  if (root.IsNull())
    usage_error(
        fmt::format("{}: the config is empty (no sections; leave out --config for the "
                    "defaults)",
                    source));
  if (!root.IsMap())
    usage_error(
        fmt::format("{}: the config must be a mapping of sections, like 'model: {{n_layer: "
                    "4}}'",
                    source));
  try {
    merge_node(values_, stated_, root, "", source);
  } catch (const YAML::Exception& e) {  // a key that is not a scalar, say
    usage_error(fmt::format("{}:{}: malformed config: {}", source, e.mark.line + 1, e.msg));
  }
}

void Config::apply_override(const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    usage_error(fmt::format("--set '{}': expected key=value", assignment));
  const std::string key = assignment.substr(0, eq);
  const KeySpec* spec = find_spec(key);
  if (!spec) {
    if (const std::string keys = section_keys(key); !keys.empty())
      usage_error(fmt::format("--set: '{}' is a section; set one of its keys ({})", key, keys));
    usage_error(fmt::format("--set: unknown key '{}'{}", key, did_you_mean(key)));
  }
  YAML::Node node;
  try {
    node = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    usage_error(fmt::format("--set {}: malformed value: {}", key, e.msg));
  }
  values_[key] = parse_value(*spec, node, "--set");
  stated_.insert(key);
}

const Value& Config::get(const std::string& key, Kind kind) const {
  const KeySpec* spec = find_spec(key);
  TRAINER_ASSERT(spec && spec->kind == kind, "config key '{}' read as the wrong type", key);
  return values_.at(key);
}

int64_t Config::integer(const std::string& k) const {
  return std::get<int64_t>(get(k, Kind::integer));
}
double Config::real(const std::string& k) const {
  return std::get<double>(get(k, Kind::real));
}
bool Config::boolean(const std::string& k) const {
  return std::get<bool>(get(k, Kind::boolean));
}
const std::string& Config::text(const std::string& k) const {
  return std::get<std::string>(get(k, Kind::text));
}
const std::vector<std::string>& Config::list(const std::string& k) const {
  return std::get<std::vector<std::string>>(get(k, Kind::list));
}

void Config::set(const std::string& key, Value v) {
  const KeySpec* spec = find_spec(key);
  TRAINER_ASSERT(spec && spec->kind == Kind(v.index()), "config key '{}' set with the wrong type",
                 key);
  values_[key] = std::move(v);
  stated_.insert(key);
}

std::string Config::to_yaml_value(const std::string& key) const {
  return format_value(values_.at(key));
}

std::string Config::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string section;
  for (const KeySpec& s : schema()) {
    std::string sec = s.key.substr(0, s.key.find('.'));
    if (sec != section) {
      if (!section.empty()) out << YAML::EndMap;
      out << YAML::Key << sec << YAML::Value << YAML::BeginMap;
      section = sec;
    }
    out << YAML::Key << s.key.substr(sec.size() + 1) << YAML::Value;
    std::visit(
        [&out](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            out << YAML::Flow << YAML::BeginSeq;
            for (const auto& x : v) out << x;
            out << YAML::EndSeq;
          } else if constexpr (std::is_same_v<T, double>) {
            out << fmt::format("{}", v);
          } else {
            out << v;
          }
        },
        values_.at(s.key));
  }
  if (!section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

uint64_t Config::digest() const {
  return hash64(to_yaml());
}

std::string schema_markdown() {
  std::ostringstream md;
  md << "# Configuration reference\n\n"
     << "Generated by `trainer config --schema`; do not edit by hand. A config file is YAML with\n"
     << "these sections; `--set key=value` (repeatable) overrides after the file.\n";
  std::string section;
  for (const KeySpec& s : schema()) {
    std::string sec = s.key.substr(0, s.key.find('.'));
    if (sec != section) {
      md << "\n## " << sec << "\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
      section = sec;
    }
    std::string def = format_value(s.default_value);
    std::string type = kind_name(s.kind);
    if (!s.choices.empty()) type = fmt::format("one of {}", fmt::join(s.choices, ", "));
    if (s.kind == Kind::integer || s.kind == Kind::real) type += " in " + domain_of(s);
    md << "| `" << s.key << "` | " << type << " | `" << def << "` | " << s.doc << " |\n";
  }
  return md.str();
}

}  // namespace trainer::app
