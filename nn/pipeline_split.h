// How a model's layers are cut into pipeline stages (Note [Pipeline stages] in
// nn/transformer.cpp): balanced by compute, or as the user lists them, and the slice one stage
// holds.
#pragma once

#include <utility>
#include <vector>

#include "nn/model_config.h"

namespace trainer::nn {

// The layers of each of `stages` x `chunks` virtual stages, in order, as [begin, end) runs.
// `sizes` (dist.pipeline_layers): each virtual stage's layer count; empty: balanced by compute
// (chunks == 1: contiguous runs minimising the largest stage's FLOPs per token, the last stage's
// head counted; interleaved: equal runs). Throws a UsageError naming the constraint: more
// virtual stages than layers, sizes that do not cover the model, equal runs that do not divide.
std::vector<std::pair<int, int>> pipeline_split(const ModelConfig& model, int stages, int chunks,
                                                const std::vector<int>& sizes);

// The slice stage `stage` of `stages` holds of `split` (its chunks: virtual stages stage,
// stage + stages, ...).
PipelineSlice stage_slice(const std::vector<std::pair<int, int>>& split, int stages, int stage);

// Each stage's training FLOPs per token (its blocks, the last stage's head; the embedding is
// a lookup): the compute balance the log reports.
std::vector<double> stage_flops(const ModelConfig& model,
                                const std::vector<std::pair<int, int>>& split, int stages);

}  // namespace trainer::nn
