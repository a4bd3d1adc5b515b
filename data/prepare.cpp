// `trainer prepare`: documents in, shards and a manifest out.
#include "data/prepare.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "data/chat_template.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"
#include "runtime/rng.h"

namespace trainer::data {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string::npos;
}

// Note [Document rules]
// text: a document is a run of non-blank lines; blank (whitespace-only) lines separate
//   documents and every file ends the current one. Lines are joined with '\n'; a trailing '\r'
//   is kept as written. jsonl: every non-blank line is a JSON object whose `field` (default
//   "text") is a string; that string is one document. chat: every non-blank line is a JSON
//   object whose `field` (default "messages") is an array of {"role", "content"} strings; one
//   conversation is one document. prompt: every non-blank line has the strings "prompt" and
//   "completion": a user message and the assistant's answer. Empty documents are skipped.
struct Document {
  std::string text;               // what the val split hashes and utf8_bytes counts
  std::vector<Message> messages;  // chat and prompt: the conversation (text is its rendering)
};

enum class Format { text, jsonl, chat, prompt };

class DocumentReader {
 public:
  DocumentReader(std::vector<fs::path> files, Format format, std::string field,
                 const ChatTemplate* chat)
      : files_(std::move(files)), format_(format), field_(std::move(field)), chat_(chat) {}

  // The next document, or false at the end of the input.
  bool next(Document& doc) {
    doc.text.clear();
    doc.messages.clear();
    std::string line;
    while (true) {
      if (!in_.is_open()) {
        if (file_ >= files_.size()) return false;
        in_.open(files_[file_], std::ios::binary);
        CHECK(in_.is_open(), "{}: cannot read input file", files_[file_].string());
        line_no_ = 0;
      }
      if (!std::getline(in_, line)) {
        CHECK(!in_.bad(), "{}: read error", files_[file_].string());
        in_.close();
        ++file_;
        if (!doc.text.empty()) return true;
        continue;
      }
      ++line_no_;
      bytes_read_ += line.size() + 1;
      if (format_ != Format::text) {
        if (is_blank(line)) continue;
        if (parse_jsonl(line, doc)) return true;
        continue;
      }
      if (is_blank(line)) {
        if (!doc.text.empty()) return true;
        continue;
      }
      if (!doc.text.empty()) doc.text += '\n';
      doc.text += line;
    }
  }
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  bool parse_jsonl(const std::string& line, Document& doc) {
    const std::string where = fmt::format("{}:{}", files_[file_].string(), line_no_);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      THROW_ERROR("{}: invalid JSON: {}", where, e.what());
    }
    CHECK(j.is_object(), "{}: expected a JSON object per line", where);
    auto string_at = [&](const nlohmann::json& o, const std::string& key, const std::string& at) {
      auto it = o.find(key);
      CHECK(it != o.end(), "{}: no field '{}{}'", where, at, key);
      CHECK(it->is_string(), "{}: field '{}{}' is not a string", where, at, key);
      return it->get<std::string>();
    };
    switch (format_) {
      case Format::jsonl:
        doc.text = string_at(j, field_, "");
        return !doc.text.empty();
      case Format::prompt:
        doc.messages = {{"user", string_at(j, "prompt", "")},
                        {"assistant", string_at(j, "completion", "")}};
        break;
      default: {
        auto it = j.find(field_);
        CHECK(it != j.end(), "{}: no field '{}'", where, field_);
        CHECK(it->is_array(), "{}: field '{}' is not an array of messages", where, field_);
        for (size_t i = 0; i < it->size(); ++i) {
          const nlohmann::json& m = (*it)[i];
          const std::string at = fmt::format("{}[{}].", field_, i);
          CHECK(m.is_object(), "{}: {} is not a message object", where,
                at.substr(0, at.size() - 1));
          doc.messages.push_back({string_at(m, "role", at), string_at(m, "content", at)});
          CHECK(chat_->roles.count(doc.messages.back().role),
                "{}: {}role '{}' is not in chat template {}", where, at, doc.messages.back().role,
                chat_->name);
        }
        if (doc.messages.empty()) return false;
      }
    }
    doc.text = joined_text(render(*chat_, doc.messages));
    return true;
  }

  std::vector<fs::path> files_;
  Format format_;
  std::string field_;
  const ChatTemplate* chat_;
  size_t file_ = 0;
  std::ifstream in_;
  uint64_t line_no_ = 0;
  uint64_t bytes_read_ = 0;
};

// One split's output: a shard writer rolled over at the size bound.
// Note [Replacing a corpus]
// A corpus directory is replaced without a moment in which it is broken: the new shards are
// written beside the old ones under names the old manifest does not use ("train-00000.bin",
// or "train-b00000.bin" when those are taken), the new manifest.json replaces the old one
// atomically (the commit), and only then are shards the new manifest does not name removed.
// A failure before the commit removes the new shards and leaves the old corpus as it was;
// shard files a crash left behind are removed by the next successful prepare. Other files in
// the directory (a tokenizer, say) are left alone.

bool is_shard_name(const std::string& name) {
  return (name.starts_with("train-") || name.starts_with("val-") ||
          name.starts_with(std::string(kHeldoutSplit) + "-")) &&
         name.ends_with(".bin");
}

struct SplitOutput {
  std::string name;
  ShardWriter writer;
  SplitInfo info;
  fs::path dir;
  uint64_t shard_bytes;
  const char* generation;     // "" or "b": see Note [Replacing a corpus]
  RemoveUnlessKept* written;  // every shard file written, removed if the prepare fails

  void flush() {
    if (writer.num_docs() == 0) return;
    std::string file = fmt::format("{}-{}{:05d}.bin", name, generation, info.shards.size());
    ShardEntry e{file, writer.num_docs(), writer.num_tokens(), writer.file_bytes()};
    written->add(dir / file);
    writer.write(dir / file);
    info.shards.push_back(e);
  }
  void add(const EncodedConversation& doc, uint64_t text_bytes) {
    const std::vector<int32_t>& tokens = doc.tokens;
    if (writer.num_docs() > 0 &&
        writer.file_bytes() + 8 + tokens.size() * writer.token_bytes() + tokens.size() / 8 + 1 >
            shard_bytes)
      flush();
    writer.add_document(tokens, doc.counted);
    info.documents += 1;
    info.tokens += tokens.size();
    info.utf8_bytes += text_bytes;
  }
};

// --format: text, jsonl[:field] (default "text"), chat[:field] (default "messages"), prompt.
std::pair<Format, std::string> parse_format(const std::string& format) {
  const size_t colon = format.find(':');
  const std::string kind = format.substr(0, colon);
  const std::string field = colon == std::string::npos ? "" : format.substr(colon + 1);
  const bool whole = colon == std::string::npos;
  if (format == "text") return {Format::text, ""};
  if (format == "prompt") return {Format::prompt, ""};
  if (kind == "jsonl" && (whole || !field.empty())) return {Format::jsonl, whole ? "text" : field};
  if (kind == "chat" && (whole || !field.empty()))
    return {Format::chat, whole ? "messages" : field};
  throw UsageError(fmt::format(
      "unknown input format '{}' (text, jsonl, jsonl:<field>, chat, chat:<field>, prompt)",
      format));
}

std::string human_duration(double s) {
  if (s < 0 || s > 1e7) return "?";
  int t = int(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02d}m", t / 3600, t / 60 % 60)
                   : fmt::format("{}m{:02d}s", t / 60, t % 60);
}

}  // namespace

bool is_val_document(std::string_view text, double val_fraction) {
  if (val_fraction <= 0) return false;
  uint64_t h = hash64(text);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return double(h >> 11) * 0x1.0p-53 < val_fraction;
}

PrepareSummary prepare_corpus(const PrepareOptions& o) {
  auto t0 = Clock::now();
  // Named variables, not a structured binding: the lambdas below capture them (clang before 16,
  // the fuzzers' compiler, cannot capture a binding).
  const std::pair<Format, std::string> parsed = parse_format(o.format);
  const Format format = parsed.first;
  const std::string& field = parsed.second;
  const bool conversations = format == Format::chat || format == Format::prompt;
  if (!conversations && !o.chat_template.empty())
    throw UsageError(
        fmt::format("--template applies to the chat and prompt formats, not '{}'", o.format));
  if (format == Format::chat && o.chat_template.empty())
    throw UsageError("the chat format needs --template (chatml, llama3, plain or a .json file)");
  std::optional<ChatTemplate> chat;
  if (conversations) chat = chat_template(o.chat_template.empty() ? "plain" : o.chat_template);
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    throw UsageError(fmt::format("val fraction must be in [0, 1), got {}", o.val_fraction));
  if (!(o.shard_mb > 0)) throw UsageError("shard size must be positive");
  if (o.out.empty()) throw UsageError("prepare needs an output directory (--out)");

  Tokenizer tok(o.tokenizer);
  const std::vector<fs::path> files = expand_inputs(o.inputs);
  const std::vector<fs::path> val_files =
      o.val_inputs.empty() ? std::vector<fs::path>{} : expand_inputs(o.val_inputs);
  uint64_t total_bytes = 0;
  for (const fs::path& f : files) total_bytes += fs::file_size(f);
  for (const fs::path& f : val_files) total_bytes += fs::file_size(f);

  fs::create_directories(o.out);
  // The shards of the corpus being replaced stay until the new manifest is committed.
  std::set<std::string> old_shards;
  if (fs::exists(o.out / kManifestName)) {
    try {
      for (const auto& [split, info] : read_manifest(o.out).splits)
        for (const ShardEntry& e : info.shards) old_shards.insert(e.file);
    } catch (const Error&) {
      // An unreadable old manifest names nothing worth keeping.
    }
  }
  const char* generation =
      old_shards.count("train-00000.bin") || old_shards.count("val-00000.bin") ? "b" : "";
  RemoveUnlessKept written;  // see Note [Replacing a corpus]

  uint32_t vocab = uint32_t(tok.vocab_size());
  uint64_t shard_bytes = uint64_t(o.shard_mb * 1024 * 1024);
  SplitOutput train{
      "train", ShardWriter(vocab, tok.hash(), conversations), {}, o.out, shard_bytes, generation,
      &written};
  SplitOutput val{
      "val",   ShardWriter(vocab, tok.hash(), conversations), {}, o.out, shard_bytes, generation,
      &written};
  SplitOutput heldout{kHeldoutSplit,
                      ShardWriter(vocab, tok.hash(), conversations),
                      {},
                      o.out,
                      shard_bytes,
                      generation,
                      &written};

  int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const size_t chunk_bytes = size_t(threads) * (4 << 20);
  bool show = o.progress && ::isatty(STDERR_FILENO);
  auto last_show = t0;
  PrepareSummary sum;
  sum.input_bytes = total_bytes;
  uint64_t bytes_before = 0;  // of the files read before these

  // Reads `files`, tokenizes each chunk of documents on every core and adds each, in order, to
  // the split `route` names for it.
  auto consume = [&](const std::vector<fs::path>& files,
                     const std::function<SplitOutput&(const Document&)>& route) {
    DocumentReader reader(files, format, field, chat ? &*chat : nullptr);
    std::vector<Document> docs;
    std::vector<EncodedConversation> encoded;
    bool more = true;
    while (more) {
      docs.clear();
      size_t bytes = 0;
      Document doc;
      while (bytes < chunk_bytes && (more = reader.next(doc))) {
        bytes += doc.text.size();
        docs.push_back(std::move(doc));
      }
      encoded.assign(docs.size(), {});
      std::atomic<size_t> next_doc{0};
      std::exception_ptr error;
      std::mutex error_mu;
      auto work = [&] {
        try {
          for (size_t i; (i = next_doc.fetch_add(1)) < docs.size();) {
            if (chat) {
              encoded[i] = encode_conversation(tok, *chat, docs[i].messages, o.append_eos);
              continue;
            }
            encoded[i].tokens = tok.encode(docs[i].text);
            if (o.append_eos && tok.eos_id() >= 0) encoded[i].tokens.push_back(tok.eos_id());
          }
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu);
          error = std::current_exception();
        }
      };
      std::vector<std::thread> pool;
      for (int t = 1; t < threads && docs.size() > 1; ++t) pool.emplace_back(work);
      work();
      for (auto& th : pool) th.join();
      if (error) std::rethrow_exception(error);
      for (size_t i = 0; i < docs.size(); ++i) {
        if (encoded[i].tokens.empty()) continue;
        route(docs[i]).add(encoded[i], docs[i].text.size());
        sum.documents += 1;
        sum.tokens += encoded[i].tokens.size();
      }
      auto now = Clock::now();
      if (show && (now - last_show > std::chrono::milliseconds(500) || !more)) {
        last_show = now;
        double s = std::chrono::duration<double>(now - t0).count();
        const uint64_t read = bytes_before + reader.bytes_read();
        double rate = double(read) / std::max(s, 1e-9);
        double eta = rate > 0 ? double(total_bytes - std::min(total_bytes, read)) / rate : -1;
        std::fprintf(
            stderr, "\r[prepare] %.1f/%.1f MB  %llu docs  %llu tokens  %.1f MB/s  ETA %s   ",
            double(read) / 1e6, double(total_bytes) / 1e6, (unsigned long long)sum.documents,
            (unsigned long long)sum.tokens, rate / 1e6, human_duration(eta).c_str());
        std::fflush(stderr);
      }
    }
    bytes_before += reader.bytes_read();
  };
  consume(files, [&](const Document& d) -> SplitOutput& {
    return is_val_document(d.text, o.val_fraction) ? val : train;
  });
  const uint64_t input_documents = sum.documents;
  consume(val_files, [&](const Document&) -> SplitOutput& { return heldout; });
  if (show) std::fprintf(stderr, "\n");
  CHECK(input_documents > 0, "no documents in the input ({} file(s))", files.size());
  CHECK(val_files.empty() || sum.documents > input_documents,
        "no documents in the --val-input files ({} file(s))", val_files.size());
  train.flush();
  val.flush();
  heldout.flush();

  Manifest m;
  m.tokenizer_file = o.tokenizer.string();
  m.tokenizer_hash = tok.hash();
  m.vocab_size = vocab;
  m.eos_id = o.append_eos && (!chat || chat->eos) ? tok.eos_id() : -1;
  m.token_bytes = token_bytes_for_vocab(vocab);
  m.input_format = o.format;
  m.loss_mask = conversations;
  if (chat) m.chat_template = chat->name;
  m.inputs = o.inputs;
  m.val_fraction = o.val_fraction;
  m.splits["train"] = train.info;
  m.splits["val"] = val.info;
  if (!val_files.empty()) m.splits[kHeldoutSplit] = heldout.info;
  try {
    write_manifest(o.out, m);  // the commit
  } catch (const Error&) {
    // The rename may have happened before a later step (the directory's fsync) failed: then
    // the new manifest names the new shards, which must stay.
    auto shard_names = [](const Manifest& x) {
      std::vector<std::string> names;
      for (const auto& [split, info] : x.splits)
        for (const ShardEntry& e : info.shards) names.push_back(e.file);
      return names;
    };
    try {
      if (shard_names(read_manifest(o.out)) == shard_names(m)) written.keep();
    } catch (const std::exception&) {
    }
    throw;
  }
  written.keep();
  std::set<std::string> kept;
  for (const auto& [split, info] : m.splits)
    for (const ShardEntry& e : info.shards) kept.insert(e.file);
  for (const auto& entry : fs::directory_iterator(o.out)) {
    const std::string name = entry.path().filename().string();
    if (is_shard_name(name) && !kept.count(name)) fs::remove(entry.path());
  }
  fsync_path(o.out);

  sum.train_documents = train.info.documents;
  sum.val_documents = val.info.documents;
  sum.heldout_documents = heldout.info.documents;
  sum.shards = int(train.info.shards.size() + val.info.shards.size() + heldout.info.shards.size());
  sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  log::info(
      "prepare: {} documents, {} tokens from {:.1f} MB in {:.1f} s ({:.1f} MB/s); train {} docs "
      "/ {} tokens, val {} docs / {} tokens{}; {} shard(s) in {}",
      sum.documents, sum.tokens, double(total_bytes) / 1e6, sum.seconds,
      double(total_bytes) / 1e6 / std::max(sum.seconds, 1e-9), train.info.documents,
      train.info.tokens, val.info.documents, val.info.tokens,
      val_files.empty() ? ""
                        : fmt::format(", {} (--val-input) {} docs / {} tokens", kHeldoutSplit,
                                      heldout.info.documents, heldout.info.tokens),
      sum.shards, o.out.string());
  return sum;
}

}  // namespace trainer::data
