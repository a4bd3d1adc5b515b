// Shard format: round trip and every kind of bad input, each a one-line error naming the file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "data/corpus.h"
#include "data/shard.h"
#include "runtime/error.h"
#include "test_util.h"

namespace trainer::data {

namespace fs = std::filesystem;
namespace {

using testing::TempDir;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

fs::path small_shard(const fs::path& dir, uint32_t vocab = 1000) {
  ShardWriter w(vocab, 42);
  std::vector<int32_t> a = {1, 2, 3}, b = {4, 5, 500, 6};
  w.add_document(a);
  w.add_document(b);
  fs::path p = dir / "s.bin";
  w.write(p);
  return p;
}

// Expects `fn` to throw trainer::Error whose one-line message names `path` and `what`.
template <typename F>
void expect_error(F fn, const fs::path& path, const std::string& what) {
  try {
    fn();
    FAIL() << "no error for " << what;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path.filename().string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Shard, RoundTrip) {
  TempDir dir("shard");
  fs::path p = small_shard(dir.path);
  EXPECT_EQ(fs::file_size(p), shard_file_bytes(2, 7, 2));  // 2 documents, 3 + 4 tokens of 2 bytes
  Shard s(p, {1000, 42}, Verify::all);
  EXPECT_EQ(s.header().num_docs, 2u);
  EXPECT_EQ(s.header().num_tokens, 7u);
  EXPECT_EQ(s.header().token_bytes, 2u);
  EXPECT_EQ(s.doc_offset(1), 3u);
  std::vector<int32_t> out(4);
  s.read_tokens(3, 4, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{4, 5, 500, 6}));
}

TEST(Shard, WideTokens) {
  TempDir dir("shard");
  ShardWriter w(100000, 1);
  std::vector<int32_t> a = {99999, 0, 70000};
  w.add_document(a);
  w.write(dir.path / "w.bin");
  Shard s(dir.path / "w.bin", {}, Verify::all);
  EXPECT_EQ(s.header().token_bytes, 4u);  // a vocabulary of 100000 needs more than 16 bits
  std::vector<int32_t> out(3);
  s.read_tokens(0, 3, out.data());
  EXPECT_EQ(out, a);
}

// Whether each page of the file `path`'s mapping in this process is in its page table (bit 63 of
// its /proc/self/pagemap entry): what the process holds of the file, not what the page cache has.
std::vector<bool> mapped_pages(const fs::path& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uint64_t begin = 0, end = 0;
  while (std::getline(maps, line)) {
    if (!line.ends_with(path.string())) continue;
    std::istringstream in(line);
    char dash = 0;
    in >> std::hex >> begin >> dash >> end;
    break;
  }
  EXPECT_GT(end, begin) << path << " is not mapped";
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);  // 8 bytes a page, by address
  EXPECT_GE(fd, 0);
  std::vector<bool> present;
  for (uint64_t a = begin; a < end; a += page) {
    uint64_t entry = 0;
    EXPECT_EQ(::pread(fd, &entry, 8, off_t(a / page * 8)), 8);
    present.push_back(entry >> 63);
  }
  ::close(fd);
  return present;
}

// A read drops the pages it touched from the process (the loader's bounded memory rests on it:
// docs/data.md): afterwards no page the range overlaps is mapped, while the header's page,
// which the open read and nothing released, still is (so the check can see a mapped page).
TEST(Shard, AReadReleasesEveryPageItTouched) {
  TempDir dir("shard");
  ShardWriter w(1000, 42);
  std::vector<int32_t> doc(40000);  // 80 KB of tokens: 20 pages of 4 KiB
  for (size_t i = 0; i < doc.size(); ++i) doc[i] = int32_t(i % 1000);
  w.add_document(doc);
  const fs::path p = dir.path / "s.bin";
  w.write(p);
  Shard s(p, {1000, 42}, Verify::none);  // the open reads the header only
  std::vector<int32_t> out(30000);
  s.read_tokens(5000, out.size(), out.data());
  EXPECT_EQ(out[0], 5000 % 1000);
  const std::vector<bool> present = mapped_pages(p);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t first = (kShardHeaderBytes + 16 + 5000 * 2) / page;  // 1 document: 2 offsets
  const size_t last = (kShardHeaderBytes + 16 + 35000 * 2 - 1) / page;
  ASSERT_GT(present.size(), last);
  EXPECT_TRUE(present[0]) << "the header's page is not mapped: the check sees nothing";
  for (size_t i = first; i <= last; ++i) EXPECT_FALSE(present[i]) << "page " << i << " kept";
}

TEST(Shard, BadMagic) {
  TempDir dir("shard");
  fs::path p = small_shard(dir.path);
  std::string b = read_bytes(p);
  b[0] = 'X';
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::all); }, p, "bad magic");
}

TEST(Shard, BadVersion) {
  TempDir dir("shard");
  fs::path p = small_shard(dir.path);
  std::string b = read_bytes(p);
  b[8] = 7;
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::all); }, p, "unsupported shard version 7");
}

TEST(Shard, Truncated) {
  TempDir dir("shard");
  fs::path p = small_shard(dir.path);
  std::string b = read_bytes(p);
  write_bytes(p, b.substr(0, b.size() - 3));  // 3 bytes short of what the header implies
  expect_error([&] { Shard(p, {}, Verify::none); }, p, "truncated");
  write_bytes(p, b.substr(0, 10));  // shorter than the 64-byte header itself
  expect_error([&] { Shard(p, {}, Verify::none); }, p, "truncated");
}

TEST(Shard, ChecksumMismatch) {
  TempDir dir("shard");
  fs::path p = small_shard(dir.path);
  std::string b = read_bytes(p);
  b[b.size() - 1] ^= 0x01;
  write_bytes(p, b);
  Shard unverified(p, {}, Verify::none);  // the header alone is fine
  expect_error([&] { Shard(p, {}, Verify::all); }, p, "checksum mismatch");
  // first_use: opening is fine, the first read fails, and so does every later one.
  Shard lazy(p, {}, Verify::first_use);
  int32_t token = 0;
  expect_error([&] { lazy.read_tokens(0, 1, &token); }, p, "checksum mismatch");
  expect_error([&] { lazy.read_tokens(0, 1, &token); }, p, "checksum mismatch");
  b[b.size() - 1] ^= 0x01;  // repaired: a fresh shard checks on first use and reads
  write_bytes(p, b);
  Shard repaired(p, {}, Verify::first_use);
  repaired.read_tokens(0, 1, &token);
  unverified.read_tokens(0, 1, &token);
  b = read_bytes(p);
  b[30] ^= 0x01;  // a header count
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::none); }, p, "header checksum");
}

TEST(Shard, TokenOutOfRange) {
  TempDir dir("shard");
  fs::path p = small_shard(dir.path);
  // Rewrite the header's vocab size to 100 (< token 500) with a valid header checksum.
  std::string b = read_bytes(p);
  uint32_t vocab = 100, zero = 0;
  std::memcpy(&b[16], &vocab, 4);
  std::memcpy(&b[20], &zero, 4);
  uint32_t crc = crc32(b.data(), kShardHeaderBytes);
  std::memcpy(&b[20], &crc, 4);
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::all); }, p, "token id 500 at position 5 is out of range");
}

// A version 2 shard with a loss mask of 12 tokens: two bytes of bits, the second half used.
fs::path masked_shard(const fs::path& dir) {
  ShardWriter w(1000, 42, /*loss_mask=*/true);
  std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7, 8, 9, 10, 11, 12};
  std::vector<uint8_t> ca = {0, 0, 1, 1, 1}, cb = {0, 1, 0, 1, 1, 0, 1};
  w.add_document(a, ca);
  w.add_document(b, cb);
  fs::path p = dir / "m.bin";
  w.write(p);
  return p;
}

// Rewrites the shard's header checksum (and, with `payload`, its payload checksum) after an edit.
void reseal(std::string& b, bool payload) {
  uint32_t zero = 0;
  if (payload) {
    uint32_t crc = crc32(b.data() + kShardHeaderBytes, b.size() - kShardHeaderBytes);
    std::memcpy(&b[48], &crc, 4);
  }
  std::memcpy(&b[20], &zero, 4);
  uint32_t crc = crc32(b.data(), kShardHeaderBytes);
  std::memcpy(&b[20], &crc, 4);
}

TEST(Shard, LossMaskRoundTrip) {
  TempDir dir("shard");
  fs::path p = masked_shard(dir.path);
  EXPECT_EQ(fs::file_size(p), shard_file_bytes(2, 12, 2, true));
  EXPECT_EQ(shard_file_bytes(2, 12, 2, true), shard_file_bytes(2, 12, 2) + 2);  // 12 bits: 2 bytes
  EXPECT_EQ(read_bytes(p)[8], 2);  // a mask needs version 2
  Shard s(p, {1000, 42}, Verify::all);
  EXPECT_TRUE(s.header().has_loss_mask());
  std::vector<uint8_t> counted(9);
  s.read_counted(3, 9, counted.data());  // across the documents and the mask's byte boundary
  EXPECT_EQ(counted, (std::vector<uint8_t>{1, 1, 0, 1, 0, 1, 1, 0, 1}));
  // Without a mask every token counts, and the shard stays version 1 for older readers.
  fs::path plain = small_shard(dir.path);
  EXPECT_EQ(read_bytes(plain)[8], 1);
  Shard q(plain, {}, Verify::all);
  s.read_counted(0, 2, counted.data());
  EXPECT_EQ(counted[0] + counted[1], 0);
  q.read_counted(0, 7, counted.data());
  EXPECT_EQ(std::count(counted.begin(), counted.begin() + 7, 1), 7);
}

TEST(Shard, BadLossMaskOrFlags) {
  TempDir dir("shard");
  fs::path p = masked_shard(dir.path);
  const std::string good = read_bytes(p);
  std::string b = good;
  b.back() |= 0x10;  // bit 12: past the 12th token
  reseal(b, true);
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::all); }, p, "bits set past the last token");
  b = good;
  b[52] = 3;  // a flag this build does not know
  reseal(b, false);
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::none); }, p, "unknown shard flags 0x3");
  b = good;
  b[8] = 1;  // a version 1 shard cannot carry a mask
  reseal(b, false);
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::none); }, p, "in a version 1 shard");
  b = good;
  b.pop_back();  // the mask's last byte lost
  write_bytes(p, b);
  expect_error([&] { Shard(p, {}, Verify::none); }, p, "truncated");
}

TEST(Shard, WriterRejectsOutOfRange) {
  ShardWriter w(10, 0);
  std::vector<int32_t> a = {3, 10};
  EXPECT_THROW(w.add_document(a), Error);
}

TEST(Shard, OtherTokenizer) {
  TempDir dir("shard");
  fs::path p = small_shard(dir.path);
  expect_error([&] { Shard(p, {0, 43}, Verify::none); }, p, "another tokenizer");
  expect_error(
      [&] {
        Shard(p, {999, 0}, Verify::none);
      },
      p, "vocab size 1000 exceeds the model's 999");
  Shard(p, {1024, 0}, Verify::none);  // a model vocabulary padded beyond the tokenizer's is fine
}

TEST(Shard, Unreadable) {
  TempDir dir("shard");
  fs::path p = dir.path / "missing.bin";
  expect_error([&] { Shard(p, {}, Verify::none); }, p, "no such shard");
  fs::create_directories(dir.path / "adir.bin");
  expect_error([&] { Shard(dir.path / "adir.bin", {}, Verify::none); }, dir.path / "adir.bin",
               "no such shard");
}

TEST(Corpus, EmptyCorpusAndMissingManifest) {
  TempDir dir("shard");
  expect_error([&] { Corpus(dir.path, "train", {}, Verify::all, false); },
               dir.path / "manifest.json", "no manifest");
  testing::write_corpus(dir.path, {});
  expect_error([&] { Corpus(dir.path, "train", {}, Verify::all, false); },
               dir.path / "manifest.json", "is empty");
  expect_error([&] { Corpus(dir.path, "test", {}, Verify::all, false); },
               dir.path / "manifest.json", "no split 'test'");
  write_bytes(dir.path / "manifest.json", "{not json");
  expect_error([&] { Corpus(dir.path, "train", {}, Verify::all, false); },
               dir.path / "manifest.json", "malformed manifest");
}

TEST(Corpus, ReadsAcrossShards) {
  TempDir dir("shard");
  std::vector<uint64_t> lengths = {5, 7, 3, 9, 1};
  testing::write_corpus(dir.path, lengths, 2);
  Corpus c(dir.path, "train", {testing::kVocab, testing::kHash}, Verify::all, true);
  EXPECT_EQ(c.num_tokens(), 25u);  // 5 + 7 + 3 + 9 + 1
  EXPECT_EQ(c.docs().num_docs(), 5u);
  EXPECT_EQ(c.docs().length(3), 9u);
  std::vector<int32_t> out(9);
  c.read(c.docs().starts[2], 9, out.data());  // document 2 (shard 1) then 6 of document 3
  EXPECT_EQ(out[0], testing::token_of(2, 0));
  EXPECT_EQ(out[3], testing::token_of(3, 0));
  EXPECT_EQ(out[8], testing::token_of(3, 5));
  expect_error(
      [&] {
        Corpus(dir.path, "train", {0, 1}, Verify::none, false);
      },
      dir.path / "manifest.json", "another tokenizer");
}

}  // namespace
}  // namespace trainer::data
