// Model weights as safetensors with the architecture's Hugging Face tensor names ("wte.weight",
// "h.0.attn.c_attn.weight", ...), so other tools can read what the trainer writes.
#pragma once

#include <string>

#include "nn/param_layout.h"
#include "runtime/safetensors.h"

namespace trainer::nn {

// Adds every parameter of the host flat buffer `flat` (elements of `dtype`, fp32 or bf16, laid
// out by `layout`) to `writer`, named by the layout. `flat` must outlive writer.write().
void add_params(SafetensorsWriter& writer, const ParamLayout& layout, const void* flat,
                DType dtype = DType::f32, const std::string& prefix = "");

// Copies every parameter named in `layout` from `file` into the host fp32 buffer `flat`.
// Throws naming the file and tensor when one is missing or has another shape or dtype (a
// checkpoint of another model).
void load_params(const SafetensorsFile& file, const ParamLayout& layout, float* flat,
                 const std::string& prefix = "");

}  // namespace trainer::nn
