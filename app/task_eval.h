// Downstream evaluation on task files (JSON lines), the way llm.c and lm-eval score HellaSwag
// and LAMBADA:
//   - multiple choice, HellaSwag's shape {"ctx": ..., "endings": [...], "label": i}: each
//     ending (joined to the context by a space) scored by its summed log-likelihood given the
//     context, and by that sum over the ending's bytes (length-normalised); an example is
//     correct when its label's ending scores highest (ties: the first);
//   - last word, LAMBADA's shape {"text": ...}: correct when every token of the last word
//     (from the last space on) is the model's greedy choice.
// Every sequence starts with the tokenizer's end-of-document token, as the prepared corpus'
// documents follow one; a context too long for the model loses its oldest tokens.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "nn/transformer.h"

namespace trainer::app {

struct TaskSequence {
  std::vector<int32_t> tokens;  // [eos] context ending
  int scored_from = 1;          // tokens[scored_from..] are the ending's
  int64_t ending_bytes = 0;
};

struct TaskExample {
  std::vector<TaskSequence> choices;  // one for a last-word example
  int label = 0;
};

struct Task {
  std::string name;  // the file's stem
  bool multiple_choice = true;
  std::vector<TaskExample> examples;
};

// Reads and tokenizes `file` for sequences of at most `max_tokens`. Throws a UsageError
// naming the file and line for malformed JSON, a line of neither shape (or of the other shape
// than the first line), a label out of range, or an ending longer than the model's sequences.
Task read_task(const std::filesystem::path& file, const data::Tokenizer& tok, int max_tokens);

struct TaskScore {
  int64_t examples = 0, correct = 0, correct_norm = 0;  // correct_norm: multiple choice only
  double accuracy() const { return examples ? double(correct) / double(examples) : 0; }
  double accuracy_norm() const { return examples ? double(correct_norm) / double(examples) : 0; }
};

// How the examples are split: this process takes examples rank, rank + world, ...; `comm`
// (null on one process) sums the counts, so the score equals one process's whole.
struct TaskSplit {
  int rank = 0, world = 1;
  dist::Communicator* comm = nullptr;
  // Called in place of a forward by a process out of examples while others still run theirs
  // (sharded weights are gathered collectively); null when nothing need be.
  std::function<void()> idle_forward;
};

// Scores `task` with `model` (whole: no tensor slice), rows_per_forward sequences at a time
// (at most the model's rows). Every process runs the same number of forwards. When
// `log_likelihoods` is given, it receives each of this process's examples' choices' summed
// log-likelihoods, in order.
TaskScore score_task(nn::Transformer& model, const Task& task, int rows_per_forward,
                     const TaskSplit& split,
                     std::vector<std::vector<double>>* log_likelihoods = nullptr);

}  // namespace trainer::app
