// The keys that name prepared corpora, beside data.path: data.sources (a mixture) and
// train.val_sets (named validation sets). Each entry is parsed here, once, for the run's
// resolution and for making its folders absolute (run_training.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "app/config.h"
#include "data/loader.h"

namespace trainer::app {

// A validation set (train.val_sets): its name in the log and the metrics (empty: data.path's
// val split, logged as val_loss alone, as without the key) and how it is read.
struct ValSet {
  std::string name;
  data::LoaderConfig data;
};

// One entry naming a corpus: its NAME (empty where not given), its DIR, where DIR lies in the
// entry, and the rest: a val set's SPLIT (val by default), a source's WEIGHT and EPOCHS.
struct CorpusEntry {
  std::string name, dir;
  size_t dir_begin = 0, dir_end = 0;
  std::vector<std::string> rest;  // the fields after DIR, ':'-separated
};
// "[NAME=]DIR[:SPLIT]" of train.val_sets; throws UsageError on a malformed one.
CorpusEntry parse_val_set(const std::string& entry);
// "[NAME=]DIR:WEIGHT[:EPOCHS]" of data.sources; throws UsageError on a malformed one.
CorpusEntry parse_source(const std::string& entry);

// data.sources and data.sources_schedule into l.mixture, and each source's name.
void read_mixture(const Config& c, data::LoaderConfig& l, std::vector<std::string>& names);
// train.val_sets, read as the training data is (one epoch). Without the key: data.path's val
// split, or each source's of a mixture (`train`), under its name.
std::vector<ValSet> val_sets(const Config& c, const data::LoaderConfig& train,
                             const std::vector<std::string>& source_names);
// `c` with the DIR of every entry of data.sources and train.val_sets passed through
// `absolute`.
void map_corpus_dirs(Config& c, const std::function<std::string(const std::string&)>& absolute);

}  // namespace trainer::app
