// What the tests ask of an architecture's name when they shape a model for it.
#pragma once

#include <string>

namespace trainer::testing {

// Llama and the models that are Llama with more (Qwen2's q/k/v biases, Qwen3's head norms):
// key/value heads of their own, a SwiGLU MLP whose width rounds to model.ffn_multiple_of.
inline bool llama_like(const std::string& arch) {
  return arch == "llama" || arch == "qwen2" || arch == "qwen3";
}

}  // namespace trainer::testing
