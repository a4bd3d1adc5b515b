#include "nn/pipeline_split.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "nn/arch.h"
#include "runtime/error.h"

namespace trainer::nn {

namespace {

// FLOPs per token of one block and of the head, for training (6 per matmul parameter, and
// attention's 12 C T at the model's longest sequence, C its width).
std::pair<double, double> block_and_head_flops(const ModelConfig& m) {
  double block = 0;
  for (const Matmul& mm : arch_spec(m.whole()).block_matmuls) block += double(mm.in) * mm.out;
  block = 6 * block + 12.0 * double(m.attention_width()) * m.max_seq_len;
  return {block, 6.0 * m.vocab_size * m.n_embd};
}

// Contiguous runs of L layers into P stages, each at least one layer, minimising the largest
// stage's cost (the last carrying `head` more); ties go to the earliest split found.
std::vector<int> balanced_sizes(int L, int P, double block, double head) {
  // best[p][l]: the least largest cost of the first l layers in p stages (not the last).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(P + 1), std::vector<double>(size_t(L + 1), inf));
  std::vector<std::vector<int>> cut(size_t(P + 1), std::vector<int>(size_t(L + 1), 0));
  best[0][0] = 0;
  for (int p = 1; p <= P; ++p)
    for (int l = p; l <= L; ++l)
      for (int k = p - 1; k < l; ++k) {  // stage p takes layers [k, l)
        const double cost = (l - k) * block + (p == P ? head : 0);
        const double worst = std::max(best[size_t(p - 1)][size_t(k)], cost);
        if (worst < best[size_t(p)][size_t(l)]) {
          best[size_t(p)][size_t(l)] = worst;
          cut[size_t(p)][size_t(l)] = k;
        }
      }
  std::vector<int> sizes(static_cast<size_t>(P));
  for (int p = P, l = L; p >= 1; --p) {
    sizes[size_t(p - 1)] = l - cut[size_t(p)][size_t(l)];
    l = cut[size_t(p)][size_t(l)];
  }
  return sizes;
}

}  // namespace

std::vector<std::pair<int, int>> pipeline_split(const ModelConfig& m, int stages, int chunks,
                                                const std::vector<int>& sizes) {
  const int L = m.n_layer, V = stages * chunks;
  if (V > L)
    throw UsageError(fmt::format(
        "dist.pipeline_parallel = {}{} makes {} stages of a model of {} layers (model.n_layer): "
        "each stage needs at least one layer",
        stages, chunks > 1 ? fmt::format(" x dist.pipeline_virtual_stages = {}", chunks) : "", V,
        L));
  std::vector<int> n = sizes;
  if (!n.empty()) {
    const int64_t total = std::accumulate(n.begin(), n.end(), int64_t(0));
    if (int(n.size()) != V || total != L ||
        std::any_of(n.begin(), n.end(), [](int x) { return x < 1; }))
      throw UsageError(fmt::format(
          "dist.pipeline_layers lists {} stage(s) of {} layers in all, but the model has {} "
          "layers in {} {}stages: list one positive count per {}stage, adding up to "
          "model.n_layer",
          n.size(), total, L, V, chunks > 1 ? "virtual " : "", chunks > 1 ? "virtual " : ""));
  } else if (chunks > 1) {
    if (L % V != 0)
      throw UsageError(fmt::format(
          "dist.pipeline_virtual_stages = {} on {} stages makes {} virtual stages, which do not "
          "divide the {} layers (model.n_layer): choose virtual stages so that stages x virtual "
          "stages divides the layers, or list them in dist.pipeline_layers",
          chunks, stages, V, L));
    n.assign(size_t(V), L / V);
  } else {
    const auto [block, head] = block_and_head_flops(m);
    n = balanced_sizes(L, stages, block, head);
  }
  std::vector<std::pair<int, int>> out;
  int next = 0;
  for (int x : n) {
    out.push_back({next, next + x});
    next += x;
  }
  return out;
}

PipelineSlice stage_slice(const std::vector<std::pair<int, int>>& split, int stages, int stage) {
  PipelineSlice s;
  for (size_t v = size_t(stage); v < split.size(); v += size_t(stages))
    s.chunks.push_back(split[v]);
  s.first = stage == 0;
  s.last = stage == stages - 1;
  return s;
}

std::vector<double> stage_flops(const ModelConfig& m, const std::vector<std::pair<int, int>>& split,
                                int stages) {
  const auto [block, head] = block_and_head_flops(m);
  std::vector<double> out(size_t(stages), 0.0);
  for (size_t v = 0; v < split.size(); ++v)
    out[v % size_t(stages)] += (split[v].second - split[v].first) * block;
  out.back() += head;
  return out;
}

}  // namespace trainer::nn
