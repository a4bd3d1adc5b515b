// Token shards: the on-disk unit `trainer prepare` writes and the loader maps. A shard is a
// fixed header, the document offsets and the tokens, so a reader can map it and find any
// document without parsing. See Note [Shard format] in shard.cpp and docs/data.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/enum_names.h"
#include "runtime/file_io.h"

namespace trainer::data {

inline constexpr char kShardMagic[8] = {'T', 'R', 'N', 'S', 'H', 'R', 'D', '1'};
// Version 1: tokens only. Version 2: flags, and with kShardLossMask a loss mask after the tokens.
inline constexpr uint32_t kShardVersion = 2;
inline constexpr uint32_t kShardLossMask = 1;  // flags bit: the shard carries a loss mask
inline constexpr size_t kShardHeaderBytes = 64;

// The decoded fixed header of a shard.
struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;  // 2 or 4
  uint32_t vocab_size = 0;
  uint64_t num_docs = 0;
  uint64_t num_tokens = 0;
  uint64_t tokenizer_hash = 0;
  uint32_t payload_crc = 0;  // CRC-32 of every byte after the header
  uint32_t flags = 0;        // kShardLossMask
  bool has_loss_mask() const { return flags & kShardLossMask; }
};

// What a reader insists on; zero fields are not checked.
struct ShardExpect {
  uint32_t vocab_size = 0;  // the model's vocabulary: the shards' must not be larger
  uint64_t tokenizer_hash = 0;
};

// The byte size of a shard with these counts (and a loss mask: one bit per token).
uint64_t shard_file_bytes(uint64_t num_docs, uint64_t num_tokens, uint32_t token_bytes,
                          bool loss_mask = false);

// Decodes and checks the header of the shard bytes [data, data+size): magic, version, token
// width, header checksum, the file size the counts imply and `expect`. Throws trainer::Error
// naming `name` on the first problem.
ShardHeader parse_shard_header(const uint8_t* data, size_t size, const std::string& name,
                               const ShardExpect& expect = {});

// Checks everything after the header: the payload checksum, offsets that start at 0, never
// decrease and end at num_tokens, every token id < vocab_size, and a loss mask's unused bits 0.
// Reads the payload once in chunks; `release(offset, bytes)` (if set) is called behind the scan so
// a mapped file's pages can be dropped. Throws trainer::Error naming `name`.
void verify_shard_payload(const uint8_t* data, size_t size, const ShardHeader& header,
                          const std::string& name,
                          void (*release)(const void* ctx, size_t offset, size_t bytes) = nullptr,
                          const void* ctx = nullptr);

// When a shard's payload (its checksum, offsets and token ids) is checked: `all` when the shard
// is opened (every rank reads every shard at start), `first_use` when a read first touches it
// (on the reading thread, only the shards this process reads), `none` never (the header,
// sizes and manifest are always checked).
enum class Verify : uint8_t { all, first_use, none };
inline constexpr EnumNames<Verify, 3> kVerifyNames{
    "data.verify_checksums",
    {{{Verify::all, "all"}, {Verify::first_use, "first_use"}, {Verify::none, "none"}}}};

// A shard file mapped read-only. Resident memory follows what was read and not released.
class Shard {
 public:
  // Maps and checks the header, and the payload as `verify` says (one streaming pass).
  Shard(const std::filesystem::path& path, const ShardExpect& expect, Verify verify);
  const ShardHeader& header() const { return header_; }
  const std::filesystem::path& path() const { return file_.path(); }
  // Token offset of local document d (d <= num_docs).
  uint64_t doc_offset(uint64_t d) const;
  // Copies tokens [begin, begin+count) widened to int32, then releases their pages.
  void read_tokens(uint64_t begin, uint64_t count, int32_t* out) const;
  // Writes whether each of tokens [begin, begin+count) counts as a target in the loss (1) or
  // not (0): the loss mask's bits, or all 1 in a shard without one.
  void read_counted(uint64_t begin, uint64_t count, uint8_t* out) const;
  // Drops every resident page of the mapping (after a scan of the offsets, say).
  void release_all() const { release_bytes(0, file_.size()); }

 private:
  void release_bytes(size_t offset, size_t bytes) const;
  void verify_payload() const;
  MappedFile file_;
  Verify verify_;
  mutable std::once_flag verified_;  // first_use: the payload check has passed
  ShardHeader header_;
  size_t tokens_offset_ = 0;
  size_t mask_offset_ = 0;
};

// Accumulates documents in memory and writes them as one shard file (size bounded by the caller).
class ShardWriter {
 public:
  // With `loss_mask`, every document comes with which of its tokens count in the loss.
  ShardWriter(uint32_t vocab_size, uint64_t tokenizer_hash, bool loss_mask = false);
  // Appends a document; every id must be in [0, vocab_size). `counted` (one 0/1 per token) is
  // required with a loss mask and refused without one.
  void add_document(std::span<const int32_t> tokens, std::span<const uint8_t> counted = {});
  uint64_t num_docs() const { return offsets_.size() - 1; }
  uint64_t num_tokens() const { return offsets_.back(); }
  uint64_t file_bytes() const;
  uint32_t token_bytes() const { return token_bytes_; }
  bool loss_mask() const { return loss_mask_; }
  // Writes the shard atomically to `path` and empties the writer.
  void write(const std::filesystem::path& path);

 private:
  uint32_t vocab_size_;
  uint64_t tokenizer_hash_;
  uint32_t token_bytes_;
  bool loss_mask_;
  std::vector<uint64_t> offsets_{0};
  std::vector<uint8_t> tokens_;
  std::vector<uint8_t> mask_;  // bit i of byte i/8 (least significant first): token i counts
};

// Token width a vocabulary needs: 2 bytes up to 65536 ids, else 4.
inline uint32_t token_bytes_for_vocab(uint32_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

}  // namespace trainer::data
