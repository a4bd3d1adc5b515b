// Tokenizer training and use through SentencePiece.
#include "data/tokenizer.h"

#include <glob.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <optional>
#include <span>
#include <thread>

#include "data/bpe_tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/protobuf_wire.h"
#include "runtime/rng.h"

// Exported by libsentencepiece but not declared in its public headers.
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}

namespace trainer::data {

namespace fs = std::filesystem;

constexpr const char* kModelFile = "tokenizer.model";
constexpr const char* kJsonFile = "tokenizer.json";

std::vector<fs::path> expand_inputs(const std::vector<std::string>& patterns) {
  std::vector<fs::path> files;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<fs::path> matched;
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) matched.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    CHECK(!matched.empty(), "{}: no such file (or no file matches the pattern)", pattern);
    std::sort(matched.begin(), matched.end());
    for (const fs::path& f : matched) {
      std::error_code ec;
      CHECK(fs::is_regular_file(f, ec), "{}: not a regular file", f.string());
      files.push_back(f);
    }
  }
  return files;
}

namespace {

// --model-type byte: nothing to learn, so no input; the vocabulary is 256 bytes and one special.
void write_byte_tokenizer(const TokenizerTrainOptions& o) {
  USAGE_CHECK(o.inputs.empty(),
              "--model-type byte takes no --input: its 256 byte tokens and <|endoftext|> are "
              "fixed");
  USAGE_CHECK(o.vocab_size == 0 || o.vocab_size == 257,
              "--vocab-size {} with --model-type byte: its vocabulary is the 256 byte values and "
              "<|endoftext|>, 257 tokens",
              o.vocab_size);
  if (o.out.empty()) throw UsageError("tokenizer train needs an output path (--out)");
  if (o.out.has_parent_path()) fs::create_directories(o.out.parent_path());
  write_file_atomic(o.out, byte_tokenizer_json());
}

}  // namespace

void train_tokenizer(const TokenizerTrainOptions& o) {
  if (o.model_type == "byte") return write_byte_tokenizer(o);
  if (o.model_type != "bpe" && o.model_type != "unigram" && o.model_type != "char")
    throw UsageError(
        fmt::format("model type must be bpe, unigram, char or byte, got '{}'", o.model_type));
  const int vocab_size = o.vocab_size > 0 ? o.vocab_size : 8000;
  if (vocab_size < 300)
    throw UsageError(
        fmt::format("vocab size {} is too small: byte fallback needs 256 byte "
                    "pieces plus specials and merges (use >= 300)",
                    vocab_size));
  USAGE_CHECK(!o.inputs.empty(), "tokenizer train needs text to learn from (--input)");
  if (o.out.empty()) throw UsageError("tokenizer train needs an output path (--out)");
  std::vector<fs::path> files = expand_inputs(o.inputs);
  std::string input;
  for (const fs::path& f : files) input += (input.empty() ? "" : ",") + f.string();
  fs::path prefix = o.out;
  if (prefix.extension() == ".model") prefix.replace_extension();
  if (prefix.has_parent_path()) fs::create_directories(prefix.parent_path());
  // Trained under a temporary name and renamed into place once complete: a failed run leaves
  // an earlier tokenizer (and nothing else) behind.
  fs::path staging = prefix;
  staging += ".tmp";
  auto with = [](fs::path p, const char* ext) { return p += ext; };
  RemoveUnlessKept staged(with(staging, ".model"));
  staged.add(with(staging, ".vocab"));
  int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::unordered_map<std::string, std::string> args = {
      {"input", input},
      {"model_prefix", staging.string()},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", o.model_type},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      // A character model keeps the text as it is: no space prepended to it.
      {"add_dummy_prefix", o.model_type == "char" ? "false" : "true"},
      {"split_digits", "true"},
      {"character_coverage", fmt::format("{}", o.character_coverage)},
      {"num_threads", std::to_string(threads)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
  };
  sentencepiece::SetRandomGeneratorSeed(unsigned(o.seed == 0 ? 1 : o.seed));
  sentencepiece::logging::SetMinLogLevel(1);  // its progress chatter is INFO
  auto status = sentencepiece::SentencePieceTrainer::Train(args);
  CHECK(status.ok(), "tokenizer training failed: {}", status.ToString());
  fsync_path(with(staging, ".vocab"));
  fsync_path(with(staging, ".model"));
  fs::rename(with(staging, ".vocab"), with(prefix, ".vocab"));
  fs::rename(with(staging, ".model"), o.out);
  fsync_path(o.out.has_parent_path() ? o.out.parent_path() : fs::path("."));
}

namespace {

// SentencePiece's ModelProto: trainer_spec is field 2; in it, input (1), model_prefix (2) and
// input_format (7) say where the training text was read and the model written, and
// num_threads (16) how many threads trained it (train_tokenizer's default: the machine's).
constexpr uint64_t kTrainerSpec = 2;
constexpr uint64_t kWhereFields[] = {1, 2, 7, 16};

// The message's bytes without the fields `drop` (in its top level).
std::optional<std::string> without_fields(std::string_view b, std::span<const uint64_t> drop) {
  std::string out;
  WireField f;
  for (size_t at = 0; at < b.size();) {
    if (!next_field(b, at, f)) return std::nullopt;
    if (std::find(drop.begin(), drop.end(), f.number) == drop.end())
      out.append(b.substr(f.begin, f.end - f.begin));
  }
  return out;
}

}  // namespace

// Note [Tokenizer identity]: a tokenizer is its pieces, scores, normaliser and the trainer
// options that shape encoding; where it was trained from and written to, and on how many
// threads (the trainer spec's input, input_format, model_prefix and num_threads, which
// SentencePiece stores in the model) is not part of it, so the same tokenizer under another
// name, or trained again on another machine with the same result, hashes the same. Bytes that do
// not parse as a model hash whole.
uint64_t tokenizer_hash(std::string_view model_bytes) {
  if (tokenizer_file_name(model_bytes) == std::string_view(kJsonFile))
    return BpeTokenizer(model_bytes, kJsonFile).hash();
  std::string content;
  WireField f;
  for (size_t at = 0; at < model_bytes.size();) {
    if (!next_field(model_bytes, at, f)) return hash64(model_bytes);
    if (f.number == kTrainerSpec && f.delimited()) {
      const auto spec =
          without_fields(model_bytes.substr(f.payload, f.end - f.payload), kWhereFields);
      if (!spec) return hash64(model_bytes);
      content += fmt::format("trainer_spec:{}:", spec->size()) + *spec;
    } else {
      content.append(model_bytes.substr(f.begin, f.end - f.begin));
    }
  }
  return hash64(content);
}

bool tokenizer_is(std::string_view model_bytes, uint64_t recorded) {
  return recorded == tokenizer_hash(model_bytes) || recorded == hash64(model_bytes);
}

const char* tokenizer_file_name(std::string_view bytes) {
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '{' ? kJsonFile : kModelFile;
}

Tokenizer::Tokenizer(const fs::path& path) : path_(path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    CHECK(fs::is_regular_file(path, ec), "tokenizer {}: no such file or folder", path.string());
    open(read_file(path));
    return;
  }
  if (fs::is_regular_file(path / kModelFile)) {
    path_ = path / kModelFile;
    open(read_file(path_));
    return;
  }
  bpe_ = std::make_unique<BpeTokenizer>(path);  // names what the folder lacks
  open(bpe_->canonical_json());
}

Tokenizer::Tokenizer(std::string_view bytes, const fs::path& from) : path_(from) {
  open(bytes);
}

void Tokenizer::open(std::string_view bytes) {
  if (tokenizer_file_name(bytes) == std::string_view(kJsonFile)) {
    if (!bpe_) bpe_ = std::make_unique<BpeTokenizer>(bytes, path_);
    bytes_ = bpe_->canonical_json();
    hash_ = bpe_->hash();
    specials_ = bpe_->special_tokens();
    return;
  }
  bytes_ = bytes;
  hash_ = tokenizer_hash(bytes);
  sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = sp_->LoadFromSerializedProto(bytes);
  CHECK(status.ok(), "{}: not a SentencePiece model: {}", path_.string(), status.ToString());
  for (int id = 0; id < sp_->GetPieceSize(); ++id)
    if (sp_->IsControl(id)) specials_.emplace_back(sp_->IdToPiece(id), id);
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (bpe_) return bpe_->encode(text);
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  CHECK(status.ok(), "{}: encoding failed: {}", path_.string(), status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::vector<int32_t> Tokenizer::encode_template(std::string_view text) const {
  std::vector<int32_t> out;
  while (!text.empty()) {
    size_t at = std::string_view::npos;
    const std::pair<std::string, int32_t>* found = nullptr;
    for (const auto& special : specials_) {
      const size_t p = special.first.empty() ? std::string_view::npos : text.find(special.first);
      if (p < at ||
          (p == at && p != std::string_view::npos && special.first.size() > found->first.size()))
        at = p, found = &special;
    }
    const std::vector<int32_t> plain = encode(text.substr(0, at));
    out.insert(out.end(), plain.begin(), plain.end());
    if (!found) break;
    out.push_back(found->second);
    text.remove_prefix(at + found->first.size());
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  if (bpe_) return bpe_->decode(ids);
  std::vector<int> v(ids.begin(), ids.end());
  for (int id : v)
    CHECK(id >= 0 && id < vocab_size(), "{}: token id {} out of range for vocab size {}",
          path_.string(), id, vocab_size());
  std::string text;
  auto status = sp_->Decode(v, &text);
  CHECK(status.ok(), "{}: decoding failed: {}", path_.string(), status.ToString());
  return text;
}

int Tokenizer::vocab_size() const {
  return bpe_ ? bpe_->vocab_size() : sp_->GetPieceSize();
}
int Tokenizer::eos_id() const {
  return bpe_ ? bpe_->eos_id() : sp_->eos_id();
}
int Tokenizer::bos_id() const {
  return bpe_ ? bpe_->bos_id() : sp_->bos_id();
}

}  // namespace trainer::data
