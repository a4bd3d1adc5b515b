// `trainer eval`: loss, perplexity and bits per byte of a checkpoint on held-out shards.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "app/options.h"
#include "app/run_setup.h"
#include "app/saved_model.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/timer.h"

namespace trainer::app {

int cmd_eval(const Args& args) {
  po::options_description desc("eval options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(),
                     "checkpoint directory, or a run directory (its latest); also positional")(
      "data", po::value<std::string>(), "prepared data directory (default: the run's data.path)")(
      "split", po::value<std::string>()->default_value("val"), "split to evaluate")(
      "max-batches", po::value<int64_t>()->default_value(0), "stop after n batches (0 = all)");
  po::variables_map vm;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  if (!parse_options("eval", args, desc, vm, &pos)) return 0;
  require_range("eval", vm, "max-batches", int64_t(0), int64_t(1) << 40);
  SavedModel saved = open_saved_model(vm["checkpoint"].as<std::string>());
  if (vm.count("data")) saved.config.set("data.path", vm["data"].as<std::string>());
  data::LoaderConfig lc = loader_config(saved.config, vm["split"].as<std::string>());
  lc.max_epochs = 1;
  lc.drop_last = true;
  data::Loader loader(lc, 0, 1);
  CHECK(data::tokenizer_is(tokenizer_of(saved).bytes, loader.corpus().manifest().tokenizer_hash),
        "{} was made with another tokenizer than checkpoint {}", lc.data_dir.string(),
        saved.checkpoint.dir.string());
  const int64_t max_batches = vm["max-batches"].as<int64_t>();
  int64_t tokens = 0, batches = 0;
  Timer t;
  nn::Model& model = *saved.model;
  model.reset_loss();
  while (max_batches == 0 || batches < max_batches) {
    auto b = loader.next();
    if (!b) break;
    tokens += model.forward({b->B, b->T, b->tokens.data(), b->targets.data(),
                             b->segments.empty() ? nullptr : b->segments.data(),
                             b->lengths.empty() ? nullptr : b->lengths.data()});
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
        saved.checkpoint.dir.string(), loss, lc.data_dir.string());
  const double bytes_per_token = double(split.utf8_bytes) / double(split.tokens);
  const double bpb = loss / std::numbers::ln2 / bytes_per_token;
  std::printf(
      "eval %s: loss %.4f | perplexity %.2f | bits/byte %.4f | %ld tokens in %ld batches "
      "(%.1f s)\n",
      lc.split.c_str(), loss, std::exp(loss), bpb, long(tokens), long(batches), t.seconds());
  nlohmann::json j = {{"checkpoint", saved.checkpoint.dir.string()},
                      {"split", lc.split},
                      {"step", saved.checkpoint.state.step},
                      {"loss", loss},
                      {"perplexity", std::exp(loss)},
                      {"bits_per_byte", bpb},
                      {"tokens", tokens},
                      {"batches", batches}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace trainer::app
