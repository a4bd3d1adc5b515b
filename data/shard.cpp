// Shard encoding, decoding and validation.
#include "data/shard.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "runtime/error.h"

namespace trainer::data {

namespace fs = std::filesystem;

// Note [Shard format]
// Little-endian, version 1 or 2:
//   0  char[8] magic "TRNSHRD1"
//   8  u32 version: 1, or 2 when flags are set (a writer uses the lowest that holds its content,
//      so a corpus without a loss mask stays readable by builds before version 2)
//  12  u32 token_bytes (2 or 4)
//  16  u32 vocab_size
//  20  u32 header_crc: CRC-32 of bytes [0, 64) with this field zeroed
//  24  u64 num_docs
//  32  u64 num_tokens
//  40  u64 tokenizer_hash (data::tokenizer_hash: of the .model's content; older shards: of its
//      bytes)
//  48  u32 payload_crc: CRC-32 of bytes [64, end)
//  52  u32 flags (version 2; 0 in version 1): bit 0 kShardLossMask; other bits must be 0
//  56  u64 reserved (0)
//  64  u64 offsets[num_docs + 1]   token offset of each document; offsets[num_docs] = num_tokens
//  ..  u16|u32 tokens[num_tokens]
//  ..  u8 mask[ceil(num_tokens / 8)] (kShardLossMask only): bit i % 8 of byte i / 8, least
//      significant first, is 1 when token i counts as a target in the loss (a response token
//      of instruction data) and 0 when it does not (a prompt); the bits past num_tokens are 0
// The file size is exactly 64 + 8 * (num_docs + 1) + token_bytes * num_tokens (+ the mask), so
// truncation is caught from the header alone; the payload checksum catches corruption.
static_assert(std::endian::native == std::endian::little, "shards are little-endian");

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

constexpr size_t kVerifyChunk = 8 << 20;  // multiple of 8: no element straddles two chunks

}  // namespace

uint64_t shard_file_bytes(uint64_t num_docs, uint64_t num_tokens, uint32_t token_bytes,
                          bool loss_mask) {
  return kShardHeaderBytes + 8 * (num_docs + 1) + uint64_t(token_bytes) * num_tokens +
         (loss_mask ? (num_tokens + 7) / 8 : 0);
}

ShardHeader parse_shard_header(const uint8_t* data, size_t size, const std::string& name,
                               const ShardExpect& expect) {
  CHECK(size >= kShardHeaderBytes, "{}: truncated shard ({} bytes, the header alone is {})", name,
        size, kShardHeaderBytes);
  CHECK(std::memcmp(data, kShardMagic, sizeof(kShardMagic)) == 0,
        "{}: not a token shard (bad magic)", name);
  ShardHeader h;
  h.version = load<uint32_t>(data + 8);
  CHECK(h.version >= 1 && h.version <= kShardVersion,
        "{}: unsupported shard version {} (this build reads 1 to {})", name, h.version,
        kShardVersion);
  uint8_t copy[kShardHeaderBytes];
  std::memcpy(copy, data, kShardHeaderBytes);
  store<uint32_t>(copy + 20, 0);
  CHECK(crc32(copy, kShardHeaderBytes) == load<uint32_t>(data + 20),
        "{}: shard header checksum mismatch (corrupt header)", name);
  h.token_bytes = load<uint32_t>(data + 12);
  h.vocab_size = load<uint32_t>(data + 16);
  h.num_docs = load<uint64_t>(data + 24);
  h.num_tokens = load<uint64_t>(data + 32);
  h.tokenizer_hash = load<uint64_t>(data + 40);
  h.payload_crc = load<uint32_t>(data + 48);
  h.flags = load<uint32_t>(data + 52);
  CHECK(h.flags == 0 || (h.version >= 2 && h.flags == kShardLossMask),
        "{}: unknown shard flags {:#x} in a version {} shard", name, h.flags, h.version);
  CHECK(h.token_bytes == 2 || h.token_bytes == 4, "{}: bad token width {} bytes", name,
        h.token_bytes);
  CHECK(h.vocab_size > 0, "{}: vocab size is 0", name);
  CHECK(h.num_docs < (uint64_t(1) << 48) && h.num_tokens < (uint64_t(1) << 48),
        "{}: implausible counts ({} documents, {} tokens)", name, h.num_docs, h.num_tokens);
  uint64_t want = shard_file_bytes(h.num_docs, h.num_tokens, h.token_bytes, h.has_loss_mask());
  CHECK(size == want, "{}: {} shard: {} bytes on disk, the header implies {}", name,
        size < want ? "truncated" : "oversized", size, want);
  CHECK(expect.vocab_size == 0 || h.vocab_size <= expect.vocab_size,
        "{}: shard vocab size {} exceeds the model's {}", name, h.vocab_size, expect.vocab_size);
  CHECK(expect.tokenizer_hash == 0 || h.tokenizer_hash == expect.tokenizer_hash,
        "{}: shard was made with another tokenizer (hash {:016x}, expected {:016x})", name,
        h.tokenizer_hash, expect.tokenizer_hash);
  return h;
}

void verify_shard_payload(const uint8_t* data, size_t size, const ShardHeader& h,
                          const std::string& name,
                          void (*release)(const void* ctx, size_t offset, size_t bytes),
                          const void* ctx) {
  const size_t offsets_end = kShardHeaderBytes + 8 * (h.num_docs + 1);
  const size_t tokens_end = offsets_end + h.token_bytes * h.num_tokens;
  uint32_t crc = 0;
  uint64_t prev = 0;
  uint32_t max_token = 0;
  uint64_t max_at = 0;
  for (size_t pos = kShardHeaderBytes; pos < size; pos += kVerifyChunk) {
    size_t end = std::min(size, pos + kVerifyChunk);
    crc = crc32(data + pos, end - pos, crc);
    // Offsets part of this chunk.
    for (size_t p = pos; p < std::min(end, offsets_end); p += 8) {
      uint64_t v = load<uint64_t>(data + p);
      uint64_t d = (p - kShardHeaderBytes) / 8;
      if (d == 0) prev = 0;
      CHECK(d != 0 || v == 0, "{}: corrupt document offsets (first is {}, not 0)", name, v);
      CHECK(v >= prev && v <= h.num_tokens,
            "{}: corrupt document offsets (document {} at {} after {}, {} tokens)", name, d, v,
            prev, h.num_tokens);
      prev = v;
    }
    // Tokens part of this chunk.
    size_t tb = std::max(pos, offsets_end), te = std::min(end, tokens_end);
    if (h.token_bytes == 2) {
      for (size_t p = tb; p < te; p += 2) {
        uint32_t t = load<uint16_t>(data + p);
        if (t > max_token) max_token = t, max_at = (p - offsets_end) / 2;
      }
    } else {
      for (size_t p = tb; p < te; p += 4) {
        uint32_t t = load<uint32_t>(data + p);
        if (t > max_token) max_token = t, max_at = (p - offsets_end) / 4;
      }
    }
    if (release) release(ctx, pos, end - pos);
  }
  CHECK(crc == h.payload_crc, "{}: shard checksum mismatch (stored {:08x}, computed {:08x})", name,
        h.payload_crc, crc);
  CHECK(prev == h.num_tokens, "{}: corrupt document offsets (last is {}, {} tokens)", name, prev,
        h.num_tokens);
  CHECK(h.num_tokens == 0 || max_token < h.vocab_size,
        "{}: token id {} at position {} is out of range for vocab size {}", name, max_token, max_at,
        h.vocab_size);
  if (h.has_loss_mask() && h.num_tokens % 8 != 0)
    CHECK((data[size - 1] >> (h.num_tokens % 8)) == 0,
          "{}: corrupt loss mask (bits set past the last token)", name);
}

Shard::Shard(const fs::path& path, const ShardExpect& expect, Verify verify) : verify_(verify) {
  std::error_code ec;
  CHECK(fs::is_regular_file(path, ec), "{}: no such shard file", path.string());
  file_ = MappedFile(path);
  header_ = parse_shard_header(file_.data(), file_.size(), path.string(), expect);
  tokens_offset_ = kShardHeaderBytes + 8 * (header_.num_docs + 1);
  mask_offset_ = tokens_offset_ + header_.token_bytes * header_.num_tokens;
  if (verify == Verify::all) verify_payload();
}

void Shard::verify_payload() const {
  verify_shard_payload(
      file_.data(), file_.size(), header_, path().string(),
      [](const void* ctx, size_t offset, size_t bytes) {
        static_cast<const Shard*>(ctx)->release_bytes(offset, bytes);
      },
      this);
}

uint64_t Shard::doc_offset(uint64_t d) const {
  return load<uint64_t>(file_.data() + kShardHeaderBytes + 8 * d);
}

void Shard::release_bytes(size_t offset, size_t bytes) const {
  constexpr size_t kPage = 4096;
  size_t begin = offset / kPage * kPage;
  size_t end = (offset + bytes + kPage - 1) / kPage * kPage;
  file_.release(begin, end - begin);
}

void Shard::read_tokens(uint64_t begin, uint64_t count, int32_t* out) const {
  if (verify_ == Verify::first_use) std::call_once(verified_, [this] { verify_payload(); });
  CHECK(begin + count <= header_.num_tokens, "{}: read of tokens [{}, {}) past the end ({})",
        path().string(), begin, begin + count, header_.num_tokens);
  const uint8_t* p = file_.data() + tokens_offset_ + begin * header_.token_bytes;
  if (header_.token_bytes == 2) {
    for (uint64_t i = 0; i < count; ++i) out[i] = load<uint16_t>(p + 2 * i);
  } else {
    for (uint64_t i = 0; i < count; ++i) out[i] = int32_t(load<uint32_t>(p + 4 * i));
  }
  release_bytes(tokens_offset_ + begin * header_.token_bytes, count * header_.token_bytes);
}

void Shard::read_counted(uint64_t begin, uint64_t count, uint8_t* out) const {
  CHECK(begin + count <= header_.num_tokens, "{}: read of tokens [{}, {}) past the end ({})",
        path().string(), begin, begin + count, header_.num_tokens);
  if (!header_.has_loss_mask()) {
    std::fill(out, out + count, uint8_t(1));
    return;
  }
  if (verify_ == Verify::first_use) std::call_once(verified_, [this] { verify_payload(); });
  const uint8_t* mask = file_.data() + mask_offset_;
  for (uint64_t i = 0; i < count; ++i) out[i] = (mask[(begin + i) / 8] >> ((begin + i) % 8)) & 1;
  release_bytes(mask_offset_ + begin / 8, (begin + count + 7) / 8 - begin / 8);
}

ShardWriter::ShardWriter(uint32_t vocab_size, uint64_t tokenizer_hash, bool loss_mask)
    : vocab_size_(vocab_size),
      tokenizer_hash_(tokenizer_hash),
      token_bytes_(token_bytes_for_vocab(vocab_size)),
      loss_mask_(loss_mask) {
  CHECK(vocab_size > 0, "shard writer: vocab size must be positive");
}

void ShardWriter::add_document(std::span<const int32_t> tokens, std::span<const uint8_t> counted) {
  TRAINER_ASSERT(loss_mask_ ? counted.size() == tokens.size() : counted.empty(),
                 "a loss mask of {} entries for {} tokens ({} shard)", counted.size(),
                 tokens.size(), loss_mask_ ? "a masked" : "an unmasked");
  for (size_t i = 0; i < counted.size(); ++i) {
    const uint64_t n = num_tokens() + i;
    if (n % 8 == 0) mask_.push_back(0);
    if (counted[i]) mask_.back() |= uint8_t(1u << (n % 8));
  }
  size_t at = tokens_.size();
  tokens_.resize(at + tokens.size() * token_bytes_);
  uint8_t* p = tokens_.data() + at;
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t t = tokens[i];
    CHECK(t >= 0 && uint32_t(t) < vocab_size_, "token id {} out of range for vocab size {}", t,
          vocab_size_);
    if (token_bytes_ == 2)
      store<uint16_t>(p + 2 * i, uint16_t(t));
    else
      store<uint32_t>(p + 4 * i, uint32_t(t));
  }
  offsets_.push_back(offsets_.back() + tokens.size());
}

uint64_t ShardWriter::file_bytes() const {
  return shard_file_bytes(num_docs(), num_tokens(), token_bytes_, loss_mask_);
}

void ShardWriter::write(const fs::path& path) {
  uint8_t header[kShardHeaderBytes] = {};
  std::memcpy(header, kShardMagic, sizeof(kShardMagic));
  store<uint32_t>(header + 8, loss_mask_ ? 2u : 1u);
  store<uint32_t>(header + 12, token_bytes_);
  store<uint32_t>(header + 16, vocab_size_);
  store<uint64_t>(header + 24, num_docs());
  store<uint64_t>(header + 32, num_tokens());
  store<uint64_t>(header + 40, tokenizer_hash_);
  if (loss_mask_) store<uint32_t>(header + 52, kShardLossMask);
  uint32_t crc = crc32(offsets_.data(), offsets_.size() * 8);
  crc = crc32(tokens_.data(), tokens_.size(), crc);
  crc = crc32(mask_.data(), mask_.size(), crc);
  store<uint32_t>(header + 48, crc);
  store<uint32_t>(header + 20, crc32(header, kShardHeaderBytes));

  fs::path tmp = path;
  tmp += ".tmp";
  {
    OutputFile out(tmp);
    out.write(header, sizeof(header));
    out.write(offsets_.data(), offsets_.size() * 8);
    out.write(tokens_.data(), tokens_.size());
    out.write(mask_.data(), mask_.size());
    out.commit();
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  CHECK(!ec, "cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
  offsets_.assign(1, 0);
  tokens_.clear();
  tokens_.shrink_to_fit();
  mask_.clear();
  mask_.shrink_to_fit();
}

}  // namespace trainer::data
