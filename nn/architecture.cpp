// The list of architectures: a new one adds its record's declaration and one entry here.
#include "nn/architecture.h"

#include <fmt/ranges.h>

#include "nn/lora.h"
#include "runtime/error.h"

namespace trainer::nn {

extern const Architecture kGpt2;   // architectures/gpt2.cpp
extern const Architecture kLlama;  // architectures/llama.cpp
extern const Architecture kQwen2;  // architectures/llama.cpp: Llama with q/k/v biases
extern const Architecture kQwen3;  // architectures/llama.cpp: Llama with q/k head norms
extern const Architecture kNeox;   // architectures/neox.cpp

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> all = {&kGpt2, &kLlama, &kQwen2, &kQwen3, &kNeox};
  return all;
}

std::vector<std::string> architecture_names() {
  std::vector<std::string> names;
  for (const Architecture* a : architectures()) names.push_back(a->name);
  return names;
}

const Architecture& find_architecture(const std::string& name) {
  for (const Architecture* a : architectures())
    if (name == a->name) return *a;
  throw UsageError(fmt::format("model.arch must be one of {}, got '{}'",
                               fmt::join(architecture_names(), ", "), name));
}

const Architecture& ModelConfig::architecture() const {
  return find_architecture(arch);
}

ArchSpec arch_spec(const ModelConfig& model) {
  ArchSpec spec = model.architecture().spec(model);
  add_adapters(spec, model);
  return slice_spec(std::move(spec), model.tensor.degree);
}

namespace {

void slice_params(std::vector<ParamSpec>& params, int degree) {
  for (ParamSpec& p : params) {
    p.full_shape = p.shape;
    if (p.split.dim < 0) continue;
    int64_t& d = p.shape[size_t(p.split.dim)];
    const int64_t pieces = int64_t(p.split.groups) * degree;
    USAGE_CHECK(d % pieces == 0,
                "dist.tensor_parallel = {} does not divide {}: its {} {} are cut into {} pieces "
                "(choose a degree, or a model.n_embd or model.ffn_hidden, that divides them)",
                degree, p.name, d, p.split.dim == 0 ? "rows" : "columns", pieces);
    d /= degree;
  }
}

}  // namespace

ArchSpec slice_spec(ArchSpec spec, int degree) {
  for (auto* unit : {&spec.embedding, &spec.block, &spec.final}) slice_params(*unit, degree);
  for (ActSpec& a : spec.block_acts)  // heads and hidden units: the parameters' checks hold
    if (a.split) a.per_token = (a.per_token - a.whole) / degree + a.whole;
  for (Matmul& m : spec.block_matmuls) {
    if (m.parallel == Parallel::column) m.out = (m.out - m.whole_out) / degree + m.whole_out;
    if (m.parallel == Parallel::row) m.in /= degree;
  }
  return spec;
}

}  // namespace trainer::nn
