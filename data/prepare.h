// Corpus preparation (`trainer prepare`): stream text, JSON-lines or conversation input, split it
// into documents, tokenize on every core (order preserved), and write train/val shards plus
// manifest.json. Byte-identical output for identical inputs. Rules in docs/data.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace trainer::data {

// The split of the documents of `prepare --val-input`, beside the hashed "val".
inline constexpr const char* kHeldoutSplit = "heldout";

struct PrepareOptions {
  std::filesystem::path tokenizer;  // .model file
  std::vector<std::string> inputs;  // files or globs
  std::string format = "text";      // text | jsonl[:field] | chat[:field] | prompt
  std::string chat_template;        // chat, prompt: a preset or a .json file (data/chat_template.h)
  std::filesystem::path out;        // output directory
  double val_fraction = 0.0;        // share of documents (by content hash) in "val"
  std::vector<std::string> val_inputs;  // files or globs whose documents make kHeldoutSplit
  double shard_mb = 100;                // shard size bound in MiB
  int threads = 0;                      // 0: all cores
  bool append_eos = true;               // end every document with the tokenizer's eos id
  bool progress = true;                 // a progress line on stderr when it is a terminal
};

struct PrepareSummary {
  uint64_t input_bytes = 0, documents = 0, tokens = 0;
  uint64_t train_documents = 0, val_documents = 0, heldout_documents = 0;
  int shards = 0;
  double seconds = 0;
};

// Prepares the corpus; throws trainer::Error (unreadable input, bad JSON at file:line, no
// documents) or UsageError (bad options).
PrepareSummary prepare_corpus(const PrepareOptions& options);

// Whether a document with this text goes to the validation split (a pure function of its
// bytes, so reruns and reorderings agree).
bool is_val_document(std::string_view text, double val_fraction);

}  // namespace trainer::data
