// `trainer prepare`: tokenize text, JSON-lines or conversation input into train/val shards and a
// manifest.
//   trainer prepare --tokenizer tok.model --input <files/globs>... --out DIR
//                   [--format text|jsonl[:field]|chat[:field]|prompt] [--template NAME|FILE]
//                   [--val-fraction F] [--val-input FILES...] [--shard-mb 100] [--threads N]
#include "app/commands.h"
#include "app/options.h"
#include "data/prepare.h"
#include "runtime/error.h"

namespace trainer::app {

int cmd_prepare(const Args& args) {
  data::PrepareOptions o;
  std::string tokenizer, out;
  po::options_description desc("trainer prepare");
  desc.add_options()("tokenizer", po::value(&tokenizer)->required(), "tokenizer .model file")(
      "input", po::value(&o.inputs)->multitoken()->required(), "input files or globs")(
      "format", po::value(&o.format)->default_value("text"),
      "text (documents separated by blank lines) | jsonl | jsonl:<field> | chat | "
      "chat:<field> (JSON lines of {\"messages\": [{\"role\", \"content\"}...]}) | prompt "
      "(JSON lines of {\"prompt\", \"completion\"})")(
      "template", po::value(&o.chat_template),
      "chat and prompt formats: chatml | llama3 | plain | a .json template (docs/data.md); "
      "the loss counts the assistant's tokens only")("out", po::value(&out)->required(),
                                                     "output directory")(
      "val-fraction", po::value(&o.val_fraction)->default_value(0.0),
      "share of documents for the val split (chosen by content hash)")(
      "val-input", po::value(&o.val_inputs)->multitoken(),
      "files or globs held out whole as the split 'heldout' (eval --split heldout, "
      "train.val_sets DIR:heldout)")("shard-mb", po::value(&o.shard_mb)->default_value(100),
                                     "shard size bound in MiB")(
      "threads", po::value(&o.threads)->default_value(0), "tokenizer threads (0: all cores)")(
      "no-eos", "do not end documents with the tokenizer's eos id")("no-progress",
                                                                    "no progress line");
  po::variables_map vm;
  if (!parse_options("prepare", args, desc, vm)) return 0;
  require_range("prepare", vm, "threads", 0, 1024);
  require_range("prepare", vm, "shard-mb", 1e-3, 1e6);
  require_range("prepare", vm, "val-fraction", 0.0, 0.999999);
  o.tokenizer = tokenizer;
  o.out = out;
  o.append_eos = !vm.count("no-eos");
  o.progress = !vm.count("no-progress");
  data::prepare_corpus(o);
  return 0;
}

}  // namespace trainer::app
