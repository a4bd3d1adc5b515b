// `trainer sample`: text from a checkpoint, with a KV cache, temperature, top-k and top-p.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <optional>

#include "app/options.h"
#include "app/saved_model.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "nn/kv_cache.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/rng.h"

namespace trainer::app {

namespace {

struct SamplingOptions {
  float temperature = 1.0f;
  int top_k = 0;       // 0 = all
  float top_p = 1.0f;  // nucleus mass
};

// Draws a token from logits(V) under the options (greedy when temperature is 0).
int32_t draw(const float* logits, int V, const SamplingOptions& o, Rng& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  if (o.temperature <= 0)
    return *std::max_element(ids.begin(), ids.end(),
                             [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  size_t keep = o.top_k > 0 ? std::min<size_t>(size_t(o.top_k), ids.size()) : ids.size();
  std::vector<double> p(keep);
  double z = 0;
  for (size_t i = 0; i < keep; ++i)
    z += p[i] = std::exp(double(logits[ids[i]] - logits[ids[0]]) / o.temperature);
  double mass = 0;
  size_t nucleus = 0;
  while (nucleus < keep && (nucleus == 0 || mass < o.top_p * z)) mass += p[nucleus++];
  double u = double(rng.uniform()) * mass;
  for (size_t i = 0; i < nucleus; ++i)
    if ((u -= p[i]) <= 0) return ids[i];
  return ids[nucleus - 1];
}

}  // namespace

int cmd_sample(const Args& args) {
  po::options_description desc("sample options");
  desc.add_options()("checkpoint", po::value<std::string>()->required(), kModelSourceHelp)(
      "prompt", po::value<std::string>()->default_value(""),
      "text to continue; with --template, the user's message to answer")(
      "template", po::value<std::string>(),
      "render the prompt as a chat turn (chatml | llama3 | plain | a .json template) and print "
      "the assistant's answer, which ends at the template's end of turn")(
      "system", po::value<std::string>(), "with --template: a system message before the prompt")(
      "tokenizer", po::value<std::string>(),
      "tokenizer (default: the checkpoint's or folder's own)")(
      "max-new-tokens", po::value<int>()->default_value(100), "tokens to generate")(
      "temperature", po::value<float>()->default_value(0.8f), "0 = greedy")(
      "top-k", po::value<int>()->default_value(0), "keep the k likeliest tokens (0 = all)")(
      "top-p", po::value<float>()->default_value(0.95f), "nucleus probability mass")(
      "seed", po::value<uint64_t>()->default_value(1), "sampling seed");
  po::variables_map vm;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  if (!parse_options("sample", args, desc, vm, &pos)) return 0;
  require_range("sample", vm, "max-new-tokens", 0, 1 << 20);
  require_range("sample", vm, "top-k", 0, 1 << 24);
  require_range("sample", vm, "temperature", 0.0f, 1e4f);
  require_range("sample", vm, "top-p", 1e-6f, 1.0f);
  SamplingOptions o{vm["temperature"].as<float>(), vm["top-k"].as<int>(), vm["top-p"].as<float>()};
  SavedModel saved = open_saved_model(vm["checkpoint"].as<std::string>(), 1, 1);
  const TokenizerBytes model =
      tokenizer_of(saved, vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "");
  const data::Tokenizer tok(model.bytes, model.from);
  // What the model reads first, what is printed before the new tokens, and where they stop.
  std::vector<int32_t> ids, text, stops = {tok.eos_id()};
  std::string stop_text;  // with a template: its end of turn, where no special token spells it
  const std::string prompt = vm["prompt"].as<std::string>();
  if (vm.count("template")) {
    const data::ChatTemplate chat = data::chat_template(vm["template"].as<std::string>());
    std::vector<data::Message> messages;
    if (vm.count("system")) messages.push_back({"system", vm["system"].as<std::string>()});
    messages.push_back({"user", prompt});
    ids = data::encode_rendered(tok, data::render(chat, messages, true)).tokens;
    stops = data::turn_end_tokens(tok, chat);
    stop_text = data::turn_end_text(chat);
  } else {
    if (vm.count("system"))
      throw UsageError("sample --system needs --template (the chat format to write it in)");
    ids = text = tok.encode(prompt);  // the prompt is decoded with the rest, for its spacing
    // A new document starts where the model's documents did (after an EOS, or a published
    // model's BOS).
    if (const int32_t start = document_start(saved, tok); start >= 0)
      ids.insert(ids.begin(), start);
  }
  CHECK(!ids.empty(), "an empty prompt needs a tokenizer with an EOS or BOS piece");
  nn::KvCacheDecoder dec(*saved.model);
  // Draw only ids the tokenizer can decode (the model's vocabulary may be padded beyond it).
  const int V = std::min(saved.model->config().vocab_size, tok.vocab_size());
  const int P = saved.model->config().max_seq_len;
  CHECK(int(ids.size()) < P, "the prompt has {} tokens; the model sees at most {}", ids.size(), P);
  // Plausible text from NaN weights would be a lie: non-finite logits stop the command.
  auto push = [&](int32_t id) {
    const float* l = dec.push(id);
    for (int v = 0; v < V; ++v)
      CHECK(std::isfinite(l[v]),
            "checkpoint {} gives non-finite logits at position {} (NaN or infinite weights?); "
            "refusing to sample",
            saved.name(), dec.length());
    return l;
  };
  const float* logits = nullptr;
  for (int32_t id : ids) logits = push(id);
  Rng rng(vm["seed"].as<uint64_t>());
  const int wanted = vm["max-new-tokens"].as<int>();
  int made = 0;
  bool ended = false;              // at the end of the text or of the turn
  std::optional<std::string> cut;  // the answer, cut where it spelt the end of turn
  for (; made < wanted && dec.length() < P && !ended; ++made) {
    int32_t next = draw(logits, V, o, rng);
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      ended = true;
      break;
    }
    text.push_back(next);
    logits = push(next);
    if (stop_text.empty()) continue;
    // A tokenizer without the template's special tokens spells the end of turn in pieces.
    std::string so_far = tok.decode(text);
    if (const size_t at = so_far.find(stop_text); at != std::string::npos) {
      so_far.resize(at);
      so_far.erase(so_far.find_last_not_of(" \t\r\n") + 1);  // npos + 1: all of it
      cut = std::move(so_far);
      ended = true;
    }
  }
  std::cout << (cut ? *cut : tok.decode(text)) << "\n";
  // A shorter sample than asked for says why (the text itself went to stdout).
  if (made < wanted && !ended)
    log::warn(
        "sample: {} of the {} new tokens asked for: the model sees at most {} positions "
        "(model.max_seq_len), and the prompt took {}",
        made, wanted, P, ids.size());
  return 0;
}

}  // namespace trainer::app
