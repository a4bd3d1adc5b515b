// `trainer eval`: loss, perplexity and bits per byte of a checkpoint on held-out shards, or its
// accuracy on downstream task files (app/task_eval.h).
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "app/options.h"
#include "app/run_setup.h"
#include "app/saved_model.h"
#include "app/task_eval.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/timer.h"

namespace trainer::app {

namespace {

constexpr int kTaskRows = 8;  // sequences per forward

// The UTF-8 bytes of the text that the counted targets of `b` spell (instruction data's
// responses): each row's runs of counted positions decoded apart. (A SentencePiece run that
// starts with a word's first piece drops the space before it, as decoding a whole text does.)
int64_t counted_bytes(const data::Batch& b, const data::Tokenizer& tok) {
  int64_t bytes = 0;
  for (int r = 0; r < b.B; ++r) {
    const int32_t* row = b.targets.data() + int64_t(r) * b.T;
    for (int t = 0; t < b.T;) {
      if (row[t] < 0) {
        ++t;
        continue;
      }
      const int begin = t;
      while (t < b.T && row[t] >= 0) ++t;
      bytes += int64_t(tok.decode({row + begin, size_t(t - begin)}).size());
    }
  }
  return bytes;
}

// `trainer eval --task`: each file's accuracy (and normalised accuracy), then all together.
int eval_tasks(const std::string& dir, const std::vector<std::string>& files,
               const std::string& tokenizer, const std::string& scores_file) {
  const dist::LaunchInfo launch = dist::discover_launch();
  USAGE_CHECK(scores_file.empty() || launch.world_size == 1,
              "eval --scores writes every example's scores from one process: run it without "
              "mpirun");
  std::string scores;
  std::unique_ptr<dist::Communicator> comm;
  if (launch.world_size > 1) comm = dist::make_communicator(launch, {});
  SavedModel saved = open_saved_model(dir, kTaskRows, 1 << 30);
  const TokenizerBytes bytes = tokenizer_of(saved, tokenizer);
  const data::Tokenizer tok(bytes.bytes, bytes.from);
  const int32_t start = std::max(0, document_start(saved, tok));  // each sequence's first
  const std::vector<Task> tasks_read = read_tasks(
      files, tok, {saved.model->exec().max_seq_len, saved.model->config().vocab_size, start});
  const TaskSplit split{launch.rank, launch.world_size, comm.get(), nullptr};
  TaskScore all;
  int64_t choice_examples = 0;  // the normalised accuracy's denominator
  nlohmann::json tasks = nlohmann::json::array();
  Timer t;
  for (const Task& task : tasks_read) {
    std::vector<std::vector<double>> lls;
    const TaskScore s = score_task(*saved.model, task, kTaskRows, split, &lls);
    for (size_t i = 0; i < lls.size() && !scores_file.empty(); ++i) {
      nlohmann::json line = {{"task", task.name},
                             {"example", i},
                             {"label", task.examples[i].label},
                             {"log_likelihoods", lls[i]}};
      for (const TaskSequence& c : task.examples[i].choices) {
        line["tokens"].push_back(c.tokens);
        line["scored_from"].push_back(c.scored_from);
        line["ending_bytes"].push_back(c.ending_bytes);
      }
      scores += line.dump() + "\n";
    }
    all.examples += s.examples, all.correct += s.correct, all.correct_norm += s.correct_norm;
    if (task.multiple_choice) choice_examples += s.examples;
    nlohmann::json j = {{"task", task.name}, {"examples", s.examples}, {"accuracy", s.accuracy()}};
    if (task.multiple_choice) j["accuracy_norm"] = s.accuracy_norm();
    if (launch.rank == 0)
      std::printf("task %s: accuracy %.4f%s | %ld examples\n", task.name.c_str(), s.accuracy(),
                  task.multiple_choice
                      ? fmt::format(" | normalised {:.4f}", s.accuracy_norm()).c_str()
                      : "",
                  long(s.examples));
    tasks.push_back(j);
  }
  if (!scores_file.empty()) write_file_atomic(scores_file, scores);
  if (launch.rank != 0) return 0;
  // Normalised accuracy is the multiple-choice examples' only.
  const double norm = choice_examples ? double(all.correct_norm) / double(choice_examples) : 0;
  std::printf("tasks: accuracy %.4f | normalised %.4f | %ld examples in %zu files (%.1f s)\n",
              all.accuracy(), norm, long(all.examples), files.size(), t.seconds());
  nlohmann::json j = {{"checkpoint", saved.name()},
                      {"step", saved.step},
                      {"tasks", tasks},
                      {"examples", all.examples},
                      {"accuracy", all.accuracy()}};
  if (choice_examples) j["accuracy_norm"] = norm;
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int cmd_eval(const Args& args) {
  po::options_description desc("eval options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(), kModelSourceHelp)(
      "data", po::value<std::string>(), "prepared data directory (default: the run's data.path)")(
      "split", po::value<std::string>()->default_value("val"), "split to evaluate")(
      "max-batches", po::value<int64_t>()->default_value(0), "stop after n batches (0 = all)")(
      "task", po::value<std::vector<std::string>>()->multitoken(),
      "score downstream task files instead (JSON lines: HellaSwag's multiple choice or "
      "LAMBADA's last word); under mpirun the examples are split over the ranks")(
      "tokenizer", po::value<std::string>(),
      "tokenizer (default: the checkpoint's or folder's own)")(
      "scores", po::value<std::string>(),
      "with --task: write each example's tokens and log-likelihoods to this file (JSON lines)");
  po::variables_map vm;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  if (!parse_options("eval", args, desc, vm, &pos)) return 0;
  require_range("eval", vm, "max-batches", int64_t(0), int64_t(1) << 40);
  if (vm.count("task"))
    return eval_tasks(vm["checkpoint"].as<std::string>(), vm["task"].as<std::vector<std::string>>(),
                      vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "",
                      vm.count("scores") ? vm["scores"].as<std::string>() : "");
  SavedModel saved = open_saved_model(vm["checkpoint"].as<std::string>());
  if (vm.count("data")) saved.config.set("data.path", vm["data"].as<std::string>());
  data::LoaderConfig lc = loader_config(saved.config, vm["split"].as<std::string>());
  lc.max_epochs = 1;
  lc.drop_last = true;
  data::Loader loader(lc, 0, 1);
  const TokenizerBytes tok_bytes =
      tokenizer_of(saved, vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "");
  USAGE_CHECK(data::tokenizer_is(tok_bytes.bytes, loader.corpus().manifest().tokenizer_hash),
              "{} was prepared with another tokenizer ({}) than {}", lc.data_dir.string(),
              loader.corpus().manifest().tokenizer_file,
              vm.count("tokenizer") ? "--tokenizer " + vm["tokenizer"].as<std::string>()
                                    : "the one of " + saved.name());
  const int64_t max_batches = vm["max-batches"].as<int64_t>();
  const bool responses = loader.corpus().has_loss_mask();
  const data::Tokenizer tok(tok_bytes.bytes, tok_bytes.from);
  int64_t tokens = 0, batches = 0, response_bytes = 0;
  Timer t;
  nn::Model& model = *saved.model;
  model.reset_loss();
  while (max_batches == 0 || batches < max_batches) {
    auto b = loader.next();
    if (!b) break;
    tokens += model.forward({b->B, b->T, b->tokens.data(), b->targets.data(),
                             b->segments.empty() ? nullptr : b->segments.data(),
                             b->lengths.empty() ? nullptr : b->lengths.data()});
    if (responses) response_bytes += counted_bytes(*b, tok);
    ++batches;
  }
  const double sum = model.read_step_scalars({}).loss_sum;
  CHECK(tokens > 0, "split '{}' of {} has no complete batch to evaluate", lc.split,
        lc.data_dir.string());
  const data::SplitInfo& split = loader.corpus().split();
  const double loss = sum / double(tokens);
  // A loss below zero is impossible and a non-finite one meaningless: neither is reported.
  CHECK(std::isfinite(loss) && loss >= 0,
        "checkpoint {} gives a loss of {} on {} (NaN or infinite weights?); no figures reported",
        saved.name(), loss, lc.data_dir.string());
  nlohmann::json j = {
      {"checkpoint", saved.name()},   {"split", lc.split}, {"step", saved.step}, {"loss", loss},
      {"perplexity", std::exp(loss)}, {"tokens", tokens},  {"batches", batches}};
  if (responses) {
    // Instruction data: the loss counts the responses only, and bits per byte their text's.
    const double bpb = sum / std::numbers::ln2 / double(std::max<int64_t>(response_bytes, 1));
    std::printf(
        "eval %s: response-only loss %.4f | perplexity %.2f | bits/byte %.4f | %ld response "
        "tokens in %ld batches (%.1f s)\n",
        lc.split.c_str(), loss, std::exp(loss), bpb, long(tokens), long(batches), t.seconds());
    j["bits_per_byte"] = bpb;
    j["loss_counts"] = "responses";
  } else {
    const double bytes_per_token = double(split.utf8_bytes) / double(split.tokens);
    const double bpb = loss / std::numbers::ln2 / bytes_per_token;
    std::printf(
        "eval %s: loss %.4f | perplexity %.2f | bits/byte %.4f | %ld tokens in %ld batches "
        "(%.1f s)\n",
        lc.split.c_str(), loss, std::exp(loss), bpb, long(tokens), long(batches), t.seconds());
    j["bits_per_byte"] = bpb;
    j["loss_counts"] = "all";
  }
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace trainer::app
