// manifest.json of a prepared corpus directory: which shards make each split, their counts,
// the tokenizer they were made with and the UTF-8 byte totals (for bits per byte).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace trainer::data {

struct ShardEntry {
  std::string file;  // relative to the corpus directory
  uint64_t documents = 0, tokens = 0, bytes = 0;
};

struct SplitInfo {
  uint64_t documents = 0, tokens = 0, utf8_bytes = 0;
  std::vector<ShardEntry> shards;
};

struct Manifest {
  int version = 1;
  std::string tokenizer_file;
  uint64_t tokenizer_hash = 0;
  uint32_t vocab_size = 0;
  int eos_id = -1;
  uint32_t token_bytes = 2;
  std::string input_format;
  std::string chat_template;  // the template conversations were rendered with ("" for text)
  bool loss_mask = false;     // the shards mark which tokens count in the loss
  std::vector<std::string> inputs;
  double val_fraction = 0;
  std::map<std::string, SplitInfo> splits;
};

inline constexpr const char* kManifestName = "manifest.json";

// Reads <dir>/manifest.json; throws trainer::Error naming the file on any problem.
Manifest read_manifest(const std::filesystem::path& dir);
// Writes <dir>/manifest.json atomically (deterministic bytes for equal contents).
void write_manifest(const std::filesystem::path& dir, const Manifest& m);

}  // namespace trainer::data
