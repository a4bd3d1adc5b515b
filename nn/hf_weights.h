// A Hugging Face model folder's weights: model.safetensors, or the shards that
// model.safetensors.index.json names, in fp32, bf16 or fp16, read into the trainer's layout a
// piece at a time (the files are mapped, so a model larger than memory loads a range at a time);
// a PEFT adapter folder's adapter_model.safetensors likewise; and both written back.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/param_layout.h"
#include "runtime/safetensors.h"

namespace trainer::nn {

// Whether `dir` is a Hugging Face model folder: a config.json and safetensors weights.
bool is_hf_folder(const std::filesystem::path& dir);
// Whether `dir` is a PEFT adapter folder: adapter_config.json and adapter_model.safetensors.
bool is_peft_adapter(const std::filesystem::path& dir);

// What a folder's weights are: a model's parameters (its LoRA adapters, if the layout has any,
// are not among them), or a PEFT adapter's LoRA factors under PEFT's names (nn/lora.h).
enum class HfTensors : uint8_t { model, peft_adapter };

class HfWeights {
 public:
  // Opens the folder's weights and checks them against the whole model `layout` is part of (a
  // model's layout, or any tensor slice or pipeline stage of it: the folder holds every layer)
  // before any value is read. Throws a UsageError naming the file and the tensor for a shard
  // the index names that is missing, a tensor named twice (in the index or in two files), a
  // parameter missing, of another shape or not F32, BF16 or F16, or a tensor that is not one of
  // the model's. With `peft_adapter`, the same for the adapter's file and the layout's
  // adapters.
  HfWeights(const std::filesystem::path& folder, const ParamLayout& layout,
            HfTensors which = HfTensors::model);
  ~HfWeights();

  // Elements [begin, end) of `p` (a parameter of the layout, or of any slice or stage of its
  // model) in the layout's order, as fp32.
  void read(const ParamInfo& p, int64_t begin, int64_t end, float* out) const;
  // The dtype of the first parameter's tensor (the folder's, in practice).
  DType dtype() const { return dtype_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorEntry*> params_;  // by the model's names
  DType dtype_ = DType::f32;
};

// Puts the rows of each parameter that Hugging Face orders otherwise (ParamSpec::hf_rows) of
// the host buffer `flat` (fp32, laid out by the whole model's `layout`) in Hugging Face's
// order, in place.
void to_hf_order(const ParamLayout& layout, float* flat);

// Writes `params` of `flat` (host fp32, laid out by their whole model's layout) into one
// safetensors file at `path`, each named name_of(p), in Hugging Face's row order and `dtype`
// (F32, BF16 or F16, rounded to nearest even).
void write_tensors(const std::filesystem::path& path, const std::vector<const ParamInfo*>& params,
                   const float* flat, DType dtype,
                   const std::function<std::string(const ParamInfo&)>& name_of);

// Writes the parameters of `flat` (host fp32, laid out by the whole model's `layout`) into
// `folder` as Hugging Face stores them: names, row order, `dtype` (F32, BF16 or F16, rounded to
// nearest even), in model.safetensors when they fit in `max_shard_bytes`, else in
// model-0000i-of-0000N.safetensors files of at most that much each (a larger tensor alone in
// one) with model.safetensors.index.json. Returns the files written, in order.
std::vector<std::string> write_hf_weights(const std::filesystem::path& folder,
                                          const ParamLayout& layout, const float* flat, DType dtype,
                                          int64_t max_shard_bytes);

}  // namespace trainer::nn
