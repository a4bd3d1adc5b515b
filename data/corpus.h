// One split of a prepared corpus as a single token stream and a list of documents, over its
// mapped shards. Reads release their pages, so resident memory stays bounded (docs/data.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/shard.h"

namespace trainer::data {

// Document boundaries of a split as global token offsets: starts[d] is where document d
// begins in the concatenated stream, starts.back() the total token count.
struct DocIndex {
  std::vector<uint64_t> starts{0};
  uint64_t num_docs() const { return starts.size() - 1; }
  uint64_t num_tokens() const { return starts.back(); }
  uint64_t length(uint64_t d) const { return starts[d + 1] - starts[d]; }
};

// Builds a DocIndex from document lengths (for tests and tools).
DocIndex doc_index_from_lengths(const std::vector<uint64_t>& lengths);

class Corpus {
 public:
  // Opens <dir>/manifest.json's split: every shard is mapped and its header checked against
  // the manifest and `expect`; each payload is checked as `verify` says. With
  // `index_docs` the document boundaries are loaded (8 bytes per document).
  Corpus(const std::filesystem::path& dir, const std::string& split, const ShardExpect& expect,
         Verify verify, bool index_docs);
  ~Corpus();
  const Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& dir() const { return dir_; }
  const SplitInfo& split() const { return manifest_.splits.at(split_); }
  uint64_t num_tokens() const { return shard_starts_.back(); }
  // Document boundaries; without index_docs one pseudo document spanning the whole stream.
  const DocIndex& docs() const { return docs_; }
  // Copies tokens [pos, pos+count) of the concatenated stream (may span shards).
  void read(uint64_t pos, uint64_t count, int32_t* out) const;
  // Whether the shards mark which tokens count in the loss (instruction data).
  bool has_loss_mask() const { return manifest_.loss_mask; }
  // Whether each of tokens [pos, pos+count) counts as a target (1) or not (0); all 1 without a
  // loss mask.
  void read_counted(uint64_t pos, uint64_t count, uint8_t* out) const;

 private:
  std::filesystem::path dir_;
  std::string split_;
  Manifest manifest_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<uint64_t> shard_starts_{0};
  DocIndex docs_;

  // Calls read(shard, local begin, count, offset into the output) for each shard's part of
  // [pos, pos+count).
  template <typename F>
  void for_each_part(uint64_t pos, uint64_t count, F read) const;
};

}  // namespace trainer::data
