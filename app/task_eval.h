// Downstream evaluation on task files (JSON lines), scored as lm-eval scores HellaSwag and
// LAMBADA:
//   - multiple choice, HellaSwag's shape {"ctx": ..., "endings": [...], "label": i}: each
//     ending (joined to the context by a space) scored by its summed log-likelihood given the
//     context, and by that sum over the ending's bytes (length-normalised); an example is
//     correct when its label's ending scores highest (ties: the first);
//   - last word, LAMBADA's shape {"text": ...}: correct when every token of the last word
//     (from the last space on) is the model's greedy choice.
// Every sequence starts with one token the caller chooses (TaskShape::start: the
// end-of-document token the prepared corpus separates documents with, or a published model's
// beginning-of-sequence token); a context too long for the model loses its oldest tokens.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "nn/transformer.h"

namespace trainer::app {

// One sequence to score: a context, then the ending whose log-likelihood counts.
struct TaskSequence {
  std::vector<int32_t> tokens;  // start, context, ending
  int scored_from = 1;          // tokens[scored_from..] are the ending's
  int64_t ending_bytes = 0;     // the length normalisation's divisor
};

// One example: its choices (one for a last-word example) and the right one.
struct TaskExample {
  std::vector<TaskSequence> choices;
  int label = 0;
};

// A task file, tokenized.
struct Task {
  std::string name;  // the file's stem: metrics call it task_<name>
  bool multiple_choice = true;
  int max_tokens = 0;  // its longest sequence: every forward is this long
  std::vector<TaskExample> examples;
};

// The model a task is tokenized for.
struct TaskShape {
  int max_tokens = 0;  // the longest sequence it runs
  int vocab_size = 0;  // ids must be below it
  int32_t start = 0;   // the token every sequence starts with
};

// Reads and tokenizes `file` for `shape`. Throws a UsageError naming the file and line for
// malformed JSON, a line of neither shape (or of the other shape than the first line), a label
// out of range, an ending longer than the model's sequences, or a token the model lacks.
Task read_task(const std::filesystem::path& file, const data::Tokenizer& tok,
               const TaskShape& shape);

// Reads every file of `files`, refusing two of one name (their metrics would collide).
std::vector<Task> read_tasks(const std::vector<std::string>& files, const data::Tokenizer& tok,
                             const TaskShape& shape);

// Counts of correct examples.
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
