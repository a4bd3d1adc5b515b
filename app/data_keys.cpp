// See data_keys.h.
#include "app/data_keys.h"

#include <charconv>
#include <cmath>
#include <filesystem>

#include "app/run_setup.h"
#include "runtime/error.h"

namespace trainer::app {

namespace {

// NAME and where DIR starts in an entry "[NAME=]DIR...".
void split_name(const std::string& key, const std::string& entry, CorpusEntry& e) {
  const size_t eq = entry.find('=');
  USAGE_CHECK(eq != 0, "{}: '{}' has '=' but no NAME before it", key, entry);
  e.dir_begin = eq == std::string::npos ? 0 : eq + 1;
  e.name = entry.substr(0, e.dir_begin ? eq : 0);
}

// A name a set or source goes by in the log and the metrics: `name`, or DIR's folder name.
std::string name_of(const std::string& key, const std::string& entry, std::string name,
                    const std::string& dir) {
  if (name.empty()) {
    const std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
    name = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
  }
  USAGE_CHECK(!name.empty() && name != "." && name != ".." &&
                  name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-.") == std::string::npos,
              "{}: '{}' names '{}': a name takes letters, digits, _, - and ., and is written "
              "NAME=...",
              key, entry, name);
  return name;
}

double number_in(const std::string& key, const std::string& entry, const std::string& text) {
  double v = 0;
  auto [p, e] = std::from_chars(text.data(), text.data() + text.size(), v);
  USAGE_CHECK(e == std::errc() && p == text.data() + text.size() && std::isfinite(v) && v >= 0,
              "{}: '{}': '{}' is not a number of at least 0", key, entry, text);
  return v;
}

}  // namespace

CorpusEntry parse_val_set(const std::string& entry) {
  CorpusEntry e;
  split_name("train.val_sets", entry, e);
  const size_t colon = entry.rfind(':');
  e.dir_end = colon == std::string::npos || colon < e.dir_begin ? entry.size() : colon;
  e.dir = entry.substr(e.dir_begin, e.dir_end - e.dir_begin);
  if (e.dir_end < entry.size()) e.rest.push_back(entry.substr(e.dir_end + 1));
  USAGE_CHECK(!e.dir.empty() && (e.rest.empty() || !e.rest[0].empty()),
              "train.val_sets: '{}' is not [NAME=]DIR[:SPLIT] (a prepared corpus, e.g. "
              "corpora/wiki:heldout)",
              entry);
  return e;
}

CorpusEntry parse_source(const std::string& entry) {
  CorpusEntry e;
  split_name("data.sources", entry, e);
  e.dir_end = std::min(entry.find(':', e.dir_begin), entry.size());
  e.dir = entry.substr(e.dir_begin, e.dir_end - e.dir_begin);
  for (size_t at = e.dir_end; at < entry.size();) {
    const size_t colon = entry.find(':', at + 1);
    e.rest.push_back(entry.substr(at + 1, colon - at - 1));
    at = std::min(colon, entry.size());
  }
  USAGE_CHECK((e.rest.size() == 1 || e.rest.size() == 2) && !e.dir.empty(),
              "data.sources: '{}' is not [NAME=]DIR:WEIGHT[:EPOCHS]", entry);
  return e;
}

void read_mixture(const Config& c, data::LoaderConfig& l, std::vector<std::string>& names) {
  for (const std::string& entry : c.list("data.sources")) {
    const CorpusEntry e = parse_source(entry);
    const std::vector<std::string>& parts = e.rest;  // WEIGHT[, EPOCHS]
    data::MixtureSource s{e.dir, number_in("data.sources", entry, parts[0]), 0};
    if (parts.size() == 2) {
      const double epochs = number_in("data.sources", entry, parts[1]);
      USAGE_CHECK(epochs >= 1 && epochs <= 1e15 && epochs == std::floor(epochs),
                  "data.sources: '{}': EPOCHS must be a whole number from 1 to 1e15", entry);
      s.max_epochs = int64_t(epochs);
    }
    const std::string name = name_of("data.sources", entry, e.name, e.dir);
    for (const std::string& n : names)
      USAGE_CHECK(n != name, "data.sources names '{}' twice: give one a name (NAME=DIR:WEIGHT)",
                  name);
    names.push_back(name);
    l.mixture.sources.push_back(s);
  }
  const size_t n = l.mixture.sources.size();
  USAGE_CHECK(n != 1,
              "data.sources names one corpus: a mixture takes two or more (one is "
              "data.path)");
  auto check_weights = [&](const std::string& where, const std::vector<double>& w) {
    double sum = 0;
    for (double x : w) sum += x;
    USAGE_CHECK(sum > 0 && std::isfinite(sum),
                "{}: the weights must add up to a finite number above 0", where);
  };
  std::vector<double> base;
  for (const data::MixtureSource& s : l.mixture.sources) base.push_back(s.weight);
  if (n > 0) check_weights("data.sources", base);
  int64_t last = 0;
  for (const std::string& entry : c.list("data.sources_schedule")) {
    USAGE_CHECK(n > 0, "data.sources_schedule needs data.sources");
    const size_t colon = entry.find(':');
    int64_t step = -1;
    if (colon != std::string::npos) {
      const auto [p, e] = std::from_chars(entry.data(), entry.data() + colon, step);
      if (e != std::errc() || p != entry.data() + colon) step = -1;
    }
    USAGE_CHECK(colon != std::string::npos && step > last,
                "data.sources_schedule: '{}' is not STEP:W1,W2,... with steps above 0 and rising",
                entry);
    data::WeightPhase phase{step, {}};
    for (size_t at = colon + 1;;) {
      const size_t comma = entry.find(',', at);
      std::string w = entry.substr(at, comma - at);
      w.erase(0, w.find_first_not_of(' '));
      phase.weights.push_back(number_in("data.sources_schedule", entry, w));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    USAGE_CHECK(phase.weights.size() == n,
                "data.sources_schedule: '{}' gives {} weights for {} sources", entry,
                phase.weights.size(), n);
    check_weights("data.sources_schedule: '" + entry + "'", phase.weights);
    last = step;
    l.mixture.phases.push_back(std::move(phase));
  }
}

std::vector<ValSet> val_sets(const Config& c, const data::LoaderConfig& train,
                             const std::vector<std::string>& source_names) {
  std::vector<ValSet> sets;
  std::vector<std::string> entries = c.list("train.val_sets");
  if (entries.empty() && source_names.empty()) sets.push_back({"", loader_config(c, "val")});
  if (entries.empty())
    for (size_t s = 0; s < source_names.size(); ++s)
      entries.push_back(source_names[s] + "=" + train.mixture.sources[s].data_dir.string());
  for (const std::string& entry : entries) {
    const CorpusEntry e = parse_val_set(entry);
    const std::string& dir = e.dir;
    const std::string split = e.rest.empty() ? "val" : e.rest[0];
    std::string name = e.name;
    if (name.empty())
      name = name_of("train.val_sets", entry, "", dir) +
             (split != "val" ? "_" + split : std::string());
    name = name_of("train.val_sets", entry, name, dir);
    for (const ValSet& s : sets)
      USAGE_CHECK(s.name != name,
                  "train.val_sets names '{}' twice: give one a name of its own (NAME=DIR[:SPLIT])",
                  name);
    ValSet s{name, loader_config(c, split)};
    s.data.data_dir = dir;
    sets.push_back(std::move(s));
  }
  for (ValSet& s : sets) s.data.max_epochs = 1;
  return sets;
}

void map_corpus_dirs(Config& c, const std::function<std::string(const std::string&)>& absolute) {
  for (const auto& [key, parse] :
       {std::pair{"train.val_sets", &parse_val_set}, std::pair{"data.sources", &parse_source}}) {
    std::vector<std::string> entries;
    for (std::string s : c.list(key)) {
      const CorpusEntry e = parse(s);
      entries.push_back(s.replace(e.dir_begin, e.dir_end - e.dir_begin, absolute(e.dir)));
    }
    c.set(key, entries);
  }
}

}  // namespace trainer::app
