// The list of architectures: a new one adds its record's declaration and one entry here.
#include "nn/architecture.h"

#include <fmt/ranges.h>

#include "runtime/error.h"

namespace trainer::nn {

extern const Architecture kGpt2;   // architectures/gpt2.cpp
extern const Architecture kLlama;  // architectures/llama.cpp
extern const Architecture kNeox;   // architectures/neox.cpp

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> all = {&kGpt2, &kLlama, &kNeox};
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
  return model.architecture().spec(model);
}

}  // namespace trainer::nn
