// Model weights as safetensors with Hugging Face GPT-2 tensor names ("wte.weight",
// "h.0.attn.c_attn.weight", ...), so other tools can read what the trainer writes.
#pragma once

#include <filesystem>

#include "nn/gpt.h"
#include "runtime/safetensors.h"

namespace trainer::nn {

// Adds every parameter of `flat` (laid out by `layout`) to `writer`, named by the layout.
// `flat` must outlive writer.write().
void add_params(SafetensorsWriter& writer, const ParamLayout& layout, const float* flat,
                const std::string& prefix = "");

// Copies every parameter named in `layout` from `file` into `flat`. Throws naming the file and
// tensor when one is missing or has another shape or dtype (a checkpoint of another model).
void load_params(const SafetensorsFile& file, const ParamLayout& layout, float* flat,
                 const std::string& prefix = "");

}  // namespace trainer::nn
