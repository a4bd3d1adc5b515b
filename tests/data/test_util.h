// Helpers for the data tests: temporary directories and synthetic prepared corpora whose
// token values encode (document, position), so a test can check any batch against its source.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "data/manifest.h"
#include "data/shard.h"

namespace trainer::data::testing {

namespace fs = std::filesystem;
using trainer::testing::TempDir;

inline constexpr uint32_t kVocab = 65536;
inline constexpr uint64_t kHash = 0x1234abcd5678ef90ull;

// Token of position `pos` of document `doc` (docs < 256, lengths <= 250 keep it decodable).
inline int32_t token_of(uint64_t doc, uint64_t pos) {
  return int32_t(((doc * 256 + pos) % (kVocab - 1)) + 1);
}

// Writes a "train" split with the given document lengths (docs_per_shard per shard); with
// `counted`, a loss mask that counts token `pos` of document `doc` iff counted(doc, pos).
inline void write_corpus(const fs::path& dir, const std::vector<uint64_t>& lengths,
                         size_t docs_per_shard = 50, uint32_t vocab = kVocab,
                         bool (*counted)(uint64_t doc, uint64_t pos) = nullptr) {
  Manifest m;
  m.tokenizer_file = "synthetic.model";
  m.tokenizer_hash = kHash;
  m.vocab_size = vocab;
  m.token_bytes = token_bytes_for_vocab(vocab);
  m.input_format = "synthetic";
  m.loss_mask = counted != nullptr;
  SplitInfo& info = m.splits["train"];
  m.splits["val"] = {};
  ShardWriter w(vocab, kHash, m.loss_mask);
  std::vector<int32_t> doc;
  std::vector<uint8_t> mask;
  auto flush = [&] {
    if (w.num_docs() == 0) return;
    std::string file = "train-" + std::to_string(info.shards.size()) + ".bin";
    info.shards.push_back({file, w.num_docs(), w.num_tokens(), w.file_bytes()});
    w.write(dir / file);
  };
  for (size_t d = 0; d < lengths.size(); ++d) {
    doc.clear();
    mask.clear();
    for (uint64_t p = 0; p < lengths[d]; ++p) {
      doc.push_back(token_of(d, p) % int32_t(vocab));
      if (counted) mask.push_back(counted(d, p) ? 1 : 0);
    }
    w.add_document(doc, mask);
    info.documents += 1;
    info.tokens += lengths[d];
    if (w.num_docs() == docs_per_shard) flush();
  }
  flush();
  write_manifest(dir, m);
}

// Document lengths in [lo, hi], reproducible.
inline std::vector<uint64_t> random_lengths(size_t n, uint64_t lo, uint64_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint64_t> dist(lo, hi);
  std::vector<uint64_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace trainer::data::testing
