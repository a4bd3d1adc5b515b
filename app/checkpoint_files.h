// The names of a checkpoint's tensor files, shared by its writer (checkpoint.cpp) and its
// reader (checkpoint_tensors.cpp). Internal to app/.
#pragma once

namespace trainer::app {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";

}  // namespace trainer::app
