// Task files and their scores; see task_eval.h.
#include "app/task_eval.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/strict_json.h"

namespace trainer::app {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// start + context + ending, the context cut from the front to fit. The ending's tokens are
// those of the whole text past the context's own (as lm-eval splits them): encoded alone, an
// ending could take pieces the text never has there (a SentencePiece word start).
TaskSequence sequence(const data::Tokenizer& tok, const std::string& context,
                      const std::string& ending, const TaskShape& shape, const std::string& where) {
  const std::vector<int32_t> whole = tok.encode(context + ending), c = tok.encode(context);
  size_t split = 0;
  while (split < c.size() && split < whole.size() && c[split] == whole[split]) ++split;
  const size_t ending_tokens = whole.size() - split;
  USAGE_CHECK(ending_tokens > 0 && ending_tokens < size_t(shape.max_tokens),
              "{}: an ending of {} tokens does not fit sequences of {} tokens", where,
              ending_tokens, shape.max_tokens);
  for (const int32_t id : whole)
    USAGE_CHECK(id < shape.vocab_size,
                "{}: token id {} is beyond the model's vocabulary of {} (another model's "
                "tokenizer?)",
                where, id, shape.vocab_size);
  const size_t keep = std::min(split, size_t(shape.max_tokens) - ending_tokens - 1);
  TaskSequence s;
  s.tokens.push_back(shape.start);
  s.tokens.insert(s.tokens.end(), whole.begin() + std::ptrdiff_t(split - keep), whole.end());
  s.scored_from = int(keep) + 1;
  s.ending_bytes = int64_t(ending.size());
  return s;
}

// A label as HellaSwag's files write it: a number, or a number in a string.
int64_t label_of(const json& j, const std::string& where) {
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_string()) try {
      size_t used = 0;
      const int64_t v = std::stoll(j.get<std::string>(), &used);
      if (used == j.get<std::string>().size()) return v;
    } catch (const std::exception&) {
    }
  throw UsageError(fmt::format("{}: \"label\" = {} is not an ending's index", where, j.dump()));
}

TaskExample example_of(const json& j, bool multiple_choice, const data::Tokenizer& tok,
                       const TaskShape& shape, const std::string& where) {
  TaskExample ex;
  if (!multiple_choice) {
    const std::string text = j.at("text").get<std::string>();
    const size_t space = text.find_last_of(' ');
    USAGE_CHECK(space != std::string::npos && space + 1 < text.size(),
                "{}: \"text\" has no last word after a space", where);
    ex.choices.push_back(sequence(tok, text.substr(0, space), text.substr(space), shape, where));
    return ex;
  }
  const json& endings = j.at("endings");
  USAGE_CHECK(endings.is_array() && endings.size() >= 2,
              "{}: \"endings\" must be a list of at least two strings", where);
  for (const json& e : endings) {
    USAGE_CHECK(e.is_string(), "{}: ending {} is not a string", where, e.dump());
    USAGE_CHECK(!e.get<std::string>().empty(),
                "{}: an ending is empty (each ending is scored by its tokens)", where);
    const std::string ending = fmt::format(" {}", e.get<std::string>());
    ex.choices.push_back(sequence(tok, j.at("ctx").get<std::string>(), ending, shape, where));
  }
  const int64_t label = label_of(j.at("label"), where);
  USAGE_CHECK(label >= 0 && label < int64_t(endings.size()),
              "{}: \"label\" {} names no ending (there are {})", where, label, endings.size());
  ex.label = int(label);
  return ex;
}

}  // namespace

Task read_task(const fs::path& file, const data::Tokenizer& tok, const TaskShape& shape) {
  std::ifstream in(file, std::ios::binary);
  USAGE_CHECK(in.good(), "task file {}: cannot be read", file.string());
  Task task{file.stem().string(), true, 0, {}};
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", file.string(), n);
    const json j = parse_strict_json(line, where);
    const bool mc =
        j.is_object() && j.contains("ctx") && j.contains("endings") && j.contains("label");
    const bool word = j.is_object() && j.contains("text");
    USAGE_CHECK(mc || word,
                "{}: neither a multiple-choice example (\"ctx\", \"endings\", \"label\") nor a "
                "last-word one (\"text\")",
                where);
    USAGE_CHECK(!(mc && word),
                "{}: both a multiple-choice example's fields (\"ctx\", \"endings\", \"label\") "
                "and a last-word one's (\"text\"): which is it?",
                where);
    for (const char* field : {"ctx", "text"})
      USAGE_CHECK(!j.contains(field) || j[field].is_string(), "{}: \"{}\" = {} is not a string",
                  where, field, j[field].dump());
    if (task.examples.empty()) task.multiple_choice = mc;
    USAGE_CHECK(mc == task.multiple_choice, "{}: a {} example in a file of {} ones", where,
                mc ? "multiple-choice" : "last-word", mc ? "last-word" : "multiple-choice");
    try {
      task.examples.push_back(example_of(j, mc, tok, shape, where));
    } catch (const json::exception& e) {
      throw UsageError(fmt::format("{}: {}", where, e.what()));
    }
  }
  USAGE_CHECK(!task.examples.empty(), "task file {} holds no example", file.string());
  for (const TaskExample& ex : task.examples)
    for (const TaskSequence& s : ex.choices)
      task.max_tokens = std::max(task.max_tokens, int(s.tokens.size()));
  return task;
}

std::vector<Task> read_tasks(const std::vector<std::string>& files, const data::Tokenizer& tok,
                             const TaskShape& shape) {
  std::vector<Task> tasks;
  for (const std::string& file : files) {
    tasks.push_back(read_task(file, tok, shape));
    for (size_t i = 0; i + 1 < tasks.size(); ++i)
      USAGE_CHECK(tasks[i].name != tasks.back().name,
                  "task files {} and {} share the name '{}' their scores are reported under",
                  files[i], file, tasks.back().name);
  }
  return tasks;
}

namespace {

// What one sequence scores: its ending's summed log-likelihood, and whether every ending token
// is the greedy choice.
struct SequenceScore {
  double log_likelihood = 0;
  bool greedy = true;
};

// Scores rows [0, n) of `batch` after a forward of B x T tokens: the log-softmax of each
// ending token's logits row, in double precision on the host.
void score_rows(nn::Transformer& model, const std::vector<const TaskSequence*>& batch, int T,
                std::vector<SequenceScore>& out) {
  const Tensor logits = model.logits();
  const int64_t V = logits.cols();
  for (size_t r = 0; r < batch.size(); ++r) {
    const TaskSequence& s = *batch[r];
    SequenceScore score;
    for (size_t t = size_t(s.scored_from); t < s.tokens.size(); ++t) {
      const std::vector<float> row =
          read_as_f32(model.context(), logits.flat((int64_t(r) * T + int64_t(t) - 1) * V, V));
      const float top = *std::max_element(row.begin(), row.end());
      double sum = 0;
      for (float x : row) sum += std::exp(double(x) - double(top));
      const int32_t target = s.tokens[t];
      score.log_likelihood += double(row[size_t(target)]) - double(top) - std::log(sum);
      score.greedy = score.greedy && row[size_t(target)] == top &&
                     std::find(row.begin(), row.end(), top) - row.begin() == target;
    }
    out.push_back(score);
  }
}

// Runs this process's sequences of `task` (and idle forwards until the busiest process is
// done), rows_per_forward at a time, each forward task.max_tokens long; their scores in order.
std::vector<SequenceScore> run_sequences(nn::Transformer& model, const Task& task,
                                         int rows_per_forward, const TaskSplit& split) {
  std::vector<const TaskSequence*> mine;
  std::vector<int64_t> rows(size_t(split.world), 0);
  for (size_t i = 0; i < task.examples.size(); ++i) {
    rows[i % size_t(split.world)] += int64_t(task.examples[i].choices.size());
    if (int(i % size_t(split.world)) == split.rank)
      for (const TaskSequence& s : task.examples[i].choices) mine.push_back(&s);
  }
  const int64_t forwards =
      (*std::max_element(rows.begin(), rows.end()) + rows_per_forward - 1) / rows_per_forward;
  const int T = task.max_tokens;  // one shape per task (a CUDA graph's, say)
  std::vector<SequenceScore> scores;
  for (int64_t f = 0; f < forwards; ++f) {
    const size_t begin = size_t(f * rows_per_forward);
    if (begin >= mine.size()) {
      if (split.idle_forward) split.idle_forward();
      continue;
    }
    const std::vector<const TaskSequence*> batch(
        mine.begin() + std::ptrdiff_t(begin),
        mine.begin() + std::ptrdiff_t(std::min(mine.size(), begin + size_t(rows_per_forward))));
    std::vector<int32_t> tokens(batch.size() * size_t(T), 0);  // padding after each: causal
    for (size_t r = 0; r < batch.size(); ++r)
      std::copy(batch[r]->tokens.begin(), batch[r]->tokens.end(), tokens.begin() + r * size_t(T));
    model.forward({int(batch.size()), T, tokens.data(), nullptr, nullptr, nullptr});
    score_rows(model, batch, T, scores);
  }
  return scores;
}

// Which choice scores highest, by `score` of a choice's index (ties: the first).
template <typename Score>
int best_choice(size_t choices, const Score& score) {
  int best = 0;
  for (size_t c = 1; c < choices; ++c)
    if (score(c) > score(size_t(best))) best = int(c);
  return best;
}

}  // namespace

TaskScore score_task(nn::Transformer& model, const Task& task, int rows_per_forward,
                     const TaskSplit& split, std::vector<std::vector<double>>* log_likelihoods) {
  TRAINER_ASSERT(model.config().tensor.degree == 1, "task scores need the whole vocabulary");
  const std::vector<SequenceScore> scores = run_sequences(model, task, rows_per_forward, split);
  // Back to examples: this process's, in order.
  std::vector<double> counts = {0, 0, 0};
  size_t at = 0;
  for (size_t i = size_t(split.rank); i < task.examples.size(); i += size_t(split.world)) {
    const TaskExample& ex = task.examples[i];
    const size_t n = ex.choices.size();
    auto ll = [&](size_t c) { return scores[at + c].log_likelihood; };
    auto per_byte = [&](size_t c) {
      return ll(c) / double(std::max<int64_t>(1, ex.choices[c].ending_bytes));
    };
    if (log_likelihoods) {
      log_likelihoods->emplace_back();
      for (size_t c = 0; c < n; ++c) log_likelihoods->back().push_back(ll(c));
    }
    counts[0] += 1;
    counts[1] += task.multiple_choice ? best_choice(n, ll) == ex.label : scores[at].greedy;
    counts[2] += task.multiple_choice && best_choice(n, per_byte) == ex.label;
    at += n;
  }
  if (split.comm && split.comm->size() > 1) split.comm->all_reduce(counts);  // exact: integers
  return {int64_t(counts[0]), int64_t(counts[1]), int64_t(counts[2])};
}

}  // namespace trainer::app
