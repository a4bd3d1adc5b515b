#include "app/run_setup.h"

#include "runtime/error.h"

namespace trainer::app {

nn::ModelConfig model_config(const Config& c) {
  nn::ModelConfig m;
  m.vocab_size = int(c.integer("model.vocab_size"));
  m.max_seq_len = int(c.integer("model.max_seq_len"));
  m.n_layer = int(c.integer("model.n_layer"));
  m.n_head = int(c.integer("model.n_head"));
  m.n_embd = int(c.integer("model.n_embd"));
  try {
    m.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return m;
}

nn::AdamWConfig adamw_config(const Config& c) {
  return {.beta1 = float(c.real("optimizer.beta1")),
          .beta2 = float(c.real("optimizer.beta2")),
          .eps = float(c.real("optimizer.eps")),
          .weight_decay = float(c.real("optimizer.weight_decay")),
          .decay_embeddings = c.boolean("optimizer.decay_embeddings")};
}

nn::LrSchedule lr_schedule(const Config& c) {
  nn::LrSchedule s;
  s.max_lr = float(c.real("optimizer.lr"));
  s.min_lr = float(c.real("optimizer.min_lr"));
  s.warmup_steps = c.integer("schedule.warmup_steps");
  s.total_steps = c.integer("train.steps");
  s.decay = nn::LrSchedule::parse_decay(c.text("schedule.decay"));
  return s;
}

data::LoaderConfig loader_config(const Config& c, const std::string& split) {
  data::LoaderConfig l;
  l.data_dir = c.text("data.path");
  l.split = split;
  l.mode = data::parse_mode(c.text("data.mode"));
  l.batch_size = int(c.integer("data.batch_size"));
  l.seq_len = int(c.integer("data.seq_len"));
  l.max_tokens = c.integer("data.max_tokens");
  if (l.max_tokens == 0) l.max_tokens = int64_t(l.batch_size) * l.seq_len;
  l.seed = uint64_t(c.integer("run.seed"));
  l.drop_last = c.boolean("data.drop_last");
  l.prefetch = int(c.integer("data.prefetch"));
  l.max_epochs = c.integer("data.epochs");
  l.vocab_size = uint32_t(c.integer("model.vocab_size"));
  if (l.seq_len > c.integer("model.max_seq_len"))
    throw UsageError(fmt::format("data.seq_len = {} exceeds model.max_seq_len = {}", l.seq_len,
                                 c.integer("model.max_seq_len")));
  return l;
}

int model_rows(const data::LoaderConfig& l) {
  if (l.mode != data::Mode::bucket) return l.batch_size;
  return int((l.max_tokens + l.seq_len - 1) / l.seq_len);
}

int64_t scheduled_value(const Config& c, const std::string& key, int64_t step, int64_t fallback) {
  int64_t value = fallback, last_step = -1;
  for (const std::string& entry : c.list(key)) {
    size_t colon = entry.find(':');
    int64_t at = 0, v = 0;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      size_t used_at = 0, used_v = 0;
      at = std::stoll(entry.substr(0, colon), &used_at);
      v = std::stoll(entry.substr(colon + 1), &used_v);
      if (used_at != colon || colon + 1 + used_v != entry.size())
        throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{}: entry '{}' is not step:value", key, entry));
    }
    if (at <= last_step || v <= 0)
      throw UsageError(
          fmt::format("{}: entry '{}': steps must increase and values be positive", key, entry));
    last_step = at;
    if (at <= step) value = v;
  }
  return value;
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  // Glob with '*' only: iterative matcher with backtracking to the last star.
  auto match = [](const std::string& s, const std::string& p) {
    size_t i = 0, j = 0, star = std::string::npos, mark = 0;
    while (i < s.size()) {
      if (j < p.size() && p[j] == '*') {
        star = j++;
        mark = i;
      } else if (j < p.size() && p[j] == s[i]) {
        ++i, ++j;
      } else if (star != std::string::npos) {
        j = star + 1;
        i = ++mark;
      } else {
        return false;
      }
    }
    while (j < p.size() && p[j] == '*') ++j;
    return j == p.size();
  };
  for (const std::string& p : patterns)
    if (match(name, p)) return true;
  return false;
}

}  // namespace trainer::app
