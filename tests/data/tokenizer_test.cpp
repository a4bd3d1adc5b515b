// Tokenizer training and round trips, and corpus preparation: document rules, splits,
// manifest totals, determinism (byte-identical shards on rerun) and input errors.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "data/corpus.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/rng.h"
#include "test_util.h"

namespace trainer::data {

namespace fs = std::filesystem;
namespace {

using testing::TempDir;

// A few hundred KB of varied English-like text with paragraphs separated by blank lines.
std::string generated_text(int paragraphs, uint32_t seed) {
  static const char* words[] = {
      "the",      "model",    "reads",   "tokens",     "from",    "shards",  "and",
      "learns",   "to",       "predict", "next",       "word",    "in",      "every",
      "document", "while",    "loader",  "prefetches", "batches", "quickly", "data",
      "is",       "streamed", "never",   "whole",      "memory",  "42",      "2024"};
  std::mt19937 rng(seed);
  std::string s;
  for (int p = 0; p < paragraphs; ++p) {
    int sentences = 1 + int(rng() % 4);
    for (int k = 0; k < sentences; ++k) {
      int n = 4 + int(rng() % 12);
      for (int i = 0; i < n; ++i) {
        std::string w = words[rng() % (sizeof(words) / sizeof(*words))];
        if (i == 0) w[0] = char(std::toupper(w[0]));
        s += w + (i + 1 < n ? " " : ". ");
      }
      s += "\n";
    }
    s += "\n";
  }
  return s;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("tok");
    write_text(dir_->path / "a.txt", generated_text(1500, 1));
    write_text(dir_->path / "b.txt", generated_text(500, 2) + "Ünïcödé → 你好 🙂\n");
    TokenizerTrainOptions o;
    o.inputs = {(dir_->path / "*.txt").string()};
    o.vocab_size = 400;
    o.out = dir_->path / "tok.model";
    train_tokenizer(o);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* TokenizerTest::dir_ = nullptr;

TEST_F(TokenizerTest, TrainEncodeDecodeRoundTrip) {
  Tokenizer tok(dir_->path / "tok.model");
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.hash(), tokenizer_hash(read_file(dir_->path / "tok.model")));
  for (std::string s :
       {std::string("The model reads tokens from shards."),
        std::string("Unseen: Ωmega ∑ 😀 tabs\tand\nnewlines  double  spaces"), std::string("x")}) {
    std::vector<int32_t> ids = tok.encode(s);
    for (int32_t id : ids) EXPECT_NE(id, 0) << "unknown piece for: " << s;  // byte fallback
    EXPECT_EQ(tok.decode(ids), s);
  }
  // Merges were learned: 4 of the 28 words the text repeats equally often, a piece each (two
  // would still be 8) among the ~140 pieces beside the 256 bytes; 22 characters unmerged.
  EXPECT_LT(tok.encode("the model reads tokens").size(), 10u);
}

// Note [Tokenizer identity]: SentencePiece stores the training inputs' and the output's
// paths in the model; the same tokenizer trained from the same text under other names is
// the same tokenizer, and one from other text is not.
TEST_F(TokenizerTest, IdentityIsTheContentNotWhereItWasWritten) {
  const fs::path other = dir_->path / "elsewhere";
  fs::create_directories(other);
  fs::copy_file(dir_->path / "a.txt", other / "first.txt");
  fs::copy_file(dir_->path / "b.txt", other / "second.txt");
  TokenizerTrainOptions o;
  o.inputs = {(other / "*.txt").string()};
  o.vocab_size = 400;
  o.out = other / "renamed.model";
  train_tokenizer(o);
  const std::string a = read_file(dir_->path / "tok.model"), b = read_file(o.out);
  ASSERT_NE(a, b);  // the paths inside differ
  EXPECT_EQ(tokenizer_hash(a), tokenizer_hash(b));
  EXPECT_TRUE(tokenizer_is(b, tokenizer_hash(a)));
  // What trainers before the content hash recorded: the hash of all the bytes.
  EXPECT_TRUE(tokenizer_is(a, hash64(a)));
  EXPECT_FALSE(tokenizer_is(b, hash64(a)));
  o.vocab_size = 390;
  o.out = other / "smaller.model";
  train_tokenizer(o);
  EXPECT_NE(tokenizer_hash(read_file(o.out)), tokenizer_hash(a));
  EXPECT_FALSE(tokenizer_is(read_file(o.out), tokenizer_hash(a)));
  // Bytes that are no model hash whole rather than fail.
  EXPECT_EQ(tokenizer_hash("\xff\xff"), hash64(std::string("\xff\xff")));
}

TEST_F(TokenizerTest, BadInputs) {
  TokenizerTrainOptions o;
  o.inputs = {(dir_->path / "nothing-*.txt").string()};
  o.out = dir_->path / "x.model";
  EXPECT_THROW(train_tokenizer(o), Error);
  o.inputs = {(dir_->path / "a.txt").string()};
  o.model_type = "wordpiece";
  EXPECT_THROW(train_tokenizer(o), UsageError);
  write_text(dir_->path / "junk.model", "not a model");
  EXPECT_THROW(Tokenizer(dir_->path / "junk.model"), Error);
  EXPECT_THROW(Tokenizer(dir_->path / "missing.model"), Error);
}

TEST_F(TokenizerTest, PrepareIsDeterministicAndCountsRight) {
  PrepareOptions o;
  o.tokenizer = dir_->path / "tok.model";
  o.inputs = {(dir_->path / "a.txt").string(), (dir_->path / "b.txt").string()};
  o.val_fraction = 0.1;
  o.shard_mb = 0.02;  // force several shards
  o.threads = 3;
  o.out = dir_->path / "out1";
  PrepareSummary s1 = prepare_corpus(o);
  o.out = dir_->path / "out2";
  o.threads = 1;
  PrepareSummary s2 = prepare_corpus(o);
  EXPECT_EQ(s1.documents, 2001u);  // 1500 + 500 paragraphs + the trailing line of b.txt
  EXPECT_EQ(s1.tokens, s2.tokens);
  // Pieces never cross a space, so ~47k words (2000 paragraphs of 1-4 sentences of 4-15
  // words) are at least as many 2-byte tokens: 95 KB, 4 or more shards of 0.02 MiB.
  EXPECT_GT(s1.shards, 2);
  // Each document is in val by its hash with probability 0.1: 200 of 2001, sigma 13.4, so the
  // bounds are 7 and 9 sigma off. A hash of the text: the same split on every CPU.
  EXPECT_GT(s1.val_documents, 100u);
  EXPECT_LT(s1.val_documents, 320u);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_->path / "out1")) {
    fs::path other = dir_->path / "out2" / e.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    EXPECT_EQ(bytes_of(e.path()), bytes_of(other)) << e.path().filename();
    ++files;
  }
  EXPECT_EQ(files, s1.shards + 1);  // and manifest.json

  Tokenizer tok(o.tokenizer);
  Corpus train(dir_->path / "out1", "train", {400, tok.hash()}, Verify::all, true);
  Corpus val(dir_->path / "out1", "val", {400, tok.hash()}, Verify::all, true);
  EXPECT_EQ(train.docs().num_docs() + val.docs().num_docs(), 2001u);
  EXPECT_EQ(train.num_tokens() + val.num_tokens(), s1.tokens);
  // Documents end with eos and decode back to the input paragraphs; UTF-8 bytes add up.
  uint64_t bytes = 0;
  std::string all = bytes_of(dir_->path / "a.txt") + bytes_of(dir_->path / "b.txt");
  for (const Corpus* c : {&train, &val}) {
    bytes += c->split().utf8_bytes;
    std::vector<int32_t> doc(c->docs().length(0));
    c->read(0, doc.size(), doc.data());
    EXPECT_EQ(doc.back(), 2);
    doc.pop_back();
    std::string text = tok.decode(doc);
    EXPECT_NE(all.find(text + "\n\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("\n\n"), std::string::npos);
  }
  // A document is its paragraph less two newlines (its last line's and the blank line), the
  // last line of b.txt less one: 4001 bytes of ~290 KB (1.4%) are not counted; 10% is 7x that.
  EXPECT_GT(bytes, all.size() * 9 / 10);
  EXPECT_LE(bytes, all.size());
}

TEST_F(TokenizerTest, PrepareJsonlAndErrors) {
  fs::path j = dir_->path / "in.jsonl";
  write_text(j,
             "{\"text\": \"first document\", \"body\": \"b1\"}\n\n{\"text\": \"second\", "
             "\"body\": \"b2\"}\n");
  PrepareOptions o;
  o.tokenizer = dir_->path / "tok.model";
  o.inputs = {j.string()};
  o.format = "jsonl";
  o.out = dir_->path / "json";
  EXPECT_EQ(prepare_corpus(o).documents, 2u);
  o.format = "jsonl:body";
  EXPECT_EQ(prepare_corpus(o).documents, 2u);
  o.format = "jsonl:missing";
  try {
    prepare_corpus(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in.jsonl:1: no field 'missing'"), std::string::npos)
        << e.what();
  }
  write_text(j, "{\"text\": \"ok\"}\n{broken\n");
  o.format = "jsonl";
  try {
    prepare_corpus(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in.jsonl:2: invalid JSON"), std::string::npos)
        << e.what();
  }
  write_text(dir_->path / "empty.txt", "\n   \n\n");
  o.inputs = {(dir_->path / "empty.txt").string()};
  o.format = "text";
  EXPECT_THROW(prepare_corpus(o), Error);  // empty corpus
  o.inputs = {(dir_->path / "nope.txt").string()};
  EXPECT_THROW(prepare_corpus(o), Error);
  o.format = "csv";
  EXPECT_THROW(prepare_corpus(o), UsageError);
}

// A failed prepare into an existing corpus leaves it exactly as it was; a successful one
// replaces it, removes the old shards and keeps other files (a tokenizer) in the directory.
TEST_F(TokenizerTest, PrepareReplacesACorpusOnlyWhenComplete) {
  const fs::path out = dir_->path / "replace";
  PrepareOptions o;
  o.tokenizer = dir_->path / "tok.model";
  o.inputs = {(dir_->path / "b.txt").string()};
  o.shard_mb = 0.02;
  o.out = out;
  prepare_corpus(o);
  write_text(out / "tok.model", bytes_of(o.tokenizer));  // unrelated files stay
  auto snapshot = [&] {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(out))
      files[e.path().filename().string()] = bytes_of(e.path());
    return files;
  };
  const auto before = snapshot();
  const fs::path bad = dir_->path / "bad.jsonl";
  write_text(bad, "{\"text\": \"fine\"}\n{\"text\": \"also fine\"}\n{broken\n");
  o.inputs = {bad.string()};
  o.format = "jsonl";
  EXPECT_THROW(prepare_corpus(o), Error);
  EXPECT_EQ(snapshot(), before) << "a failed prepare changed the corpus";
  write_text(dir_->path / "blank.txt", "\n\n");
  o.inputs = {(dir_->path / "blank.txt").string()};
  o.format = "text";
  EXPECT_THROW(prepare_corpus(o), Error);  // no documents
  EXPECT_EQ(snapshot(), before);
  // A successful replacement: the new corpus reads, old shards are gone, tok.model stays.
  o.inputs = {(dir_->path / "a.txt").string()};
  const PrepareSummary s = prepare_corpus(o);
  Corpus train(out, "train", {}, Verify::all, false);
  EXPECT_EQ(train.num_tokens(), s.tokens);
  for (const auto& [name, bytes] : before)
    if (name.ends_with(".bin")) EXPECT_FALSE(fs::exists(out / name)) << name << " was kept";
  EXPECT_TRUE(fs::exists(out / "tok.model"));
  // And again: the names alternate, so the previous corpus stays intact until the commit.
  prepare_corpus(o);
  EXPECT_EQ(Corpus(out, "train", {}, Verify::all, false).num_tokens(), s.tokens);
}

TEST_F(TokenizerTest, AFailedTrainingKeepsTheEarlierTokenizer) {
  const fs::path model = dir_->path / "keep.model";
  write_text(model, bytes_of(dir_->path / "tok.model"));
  TokenizerTrainOptions o;
  o.inputs = {(dir_->path / "blank_only.txt").string()};
  write_text(dir_->path / "blank_only.txt", "\n");
  o.vocab_size = 400;
  o.out = model;
  EXPECT_THROW(train_tokenizer(o), Error);
  EXPECT_EQ(bytes_of(model), bytes_of(dir_->path / "tok.model"));
  for (const auto& e : fs::directory_iterator(dir_->path))
    EXPECT_FALSE(e.path().filename().string().find(".tmp") != std::string::npos) << e.path();
}

}  // namespace
}  // namespace trainer::data
