// Hugging Face weight folders; see hf_weights.h.
#include "nn/hf_weights.h"

#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "nn/architecture.h"
#include "nn/lora.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::nn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kAdapter = "adapter_model.safetensors";

// The shard files an index names, in order of first mention, refusing a tensor named twice
// (which a JSON object would otherwise keep silently, the last one winning).
std::vector<std::string> index_shards(const fs::path& index) {
  std::set<std::string> names;
  std::string twice;
  bool in_map = false;
  json j;
  try {
    j = json::parse(read_file(index), [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1) in_map = parsed == "weight_map";
      if (event == json::parse_event_t::key && depth == 2 && in_map &&
          !names.insert(parsed.get<std::string>()).second && twice.empty())
        twice = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: malformed JSON: {}", index.string(), e.what()));
  }
  USAGE_CHECK(twice.empty(), "{}: tensor '{}' is named twice in weight_map", index.string(), twice);
  USAGE_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
              "{}: no \"weight_map\" object", index.string());
  std::vector<std::string> shards;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    USAGE_CHECK(file.is_string(), "{}: tensor '{}' maps to {}, not a file name", index.string(),
                tensor, file.dump());
    const std::string f = file.get<std::string>();
    USAGE_CHECK(f.find('/') == std::string::npos && f != "." && f != "..",
                "{}: tensor '{}' maps to '{}', not a file of the folder", index.string(), tensor,
                f);
    USAGE_CHECK(fs::is_regular_file(index.parent_path() / f),
                "{}: shard {} (holding '{}') is missing", index.string(),
                (index.parent_path() / f).string(), tensor);
    if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
  }
  USAGE_CHECK(!shards.empty(), "{}: weight_map names no tensor", index.string());
  return shards;
}

// Whether `name` ends with `suffix` (or is it).
bool ends_with(const std::string& name, const char* suffix) {
  return std::string_view(name).ends_with(suffix);
}

}  // namespace

bool is_hf_folder(const fs::path& dir) {
  return fs::is_regular_file(dir / "config.json") &&
         (fs::is_regular_file(dir / kSingle) || fs::is_regular_file(dir / kIndex));
}

bool is_peft_adapter(const fs::path& dir) {
  return fs::is_regular_file(dir / "adapter_config.json") && fs::is_regular_file(dir / kAdapter);
}

HfWeights::HfWeights(const fs::path& folder, const ParamLayout& slice, HfTensors which) {
  const ParamLayout layout = slice.all_layers();
  const Architecture& arch = layout.config().architecture();
  const bool adapter = which == HfTensors::peft_adapter;
  // model.safetensors first, as Hugging Face reads a folder holding both.
  std::vector<std::string> shards = {adapter ? kAdapter : kSingle};
  if (!adapter && !fs::is_regular_file(folder / kSingle) && fs::is_regular_file(folder / kIndex))
    shards = index_shards(folder / kIndex);
  USAGE_CHECK(fs::is_regular_file(folder / shards[0]), "{}: no {} (safetensors weights)",
              folder.string(), adapter ? kAdapter : "model.safetensors or " + std::string(kIndex));
  // Whether `p` is what the files hold.
  auto held = [&](const ParamInfo* p) { return p && is_adapter(p->role) == adapter; };
  std::map<std::string, std::string> where;  // layout name -> file, for the twice check
  for (const std::string& shard : shards) {
    files_.push_back(std::make_unique<SafetensorsFile>(folder / shard));
    const SafetensorsFile& f = *files_.back();
    for (const TensorEntry& t : f.tensors()) {
      std::string name = adapter ? from_peft_name(t.name) : t.name;
      const std::string prefix = arch.hf_file_prefix;
      if (!held(layout.find(name)) && !prefix.empty() && name.starts_with(prefix))
        name = name.substr(prefix.size());
      if (!held(layout.find(name))) {
        USAGE_CHECK(!adapter, "{}: tensor '{}' is not one of the adapters train.lora gives ({})",
                    f.path().string(), t.name, fmt::join(layout.config().lora.targets, ", "));
        const bool extra = std::any_of(arch.hf_extra_tensors.begin(), arch.hf_extra_tensors.end(),
                                       [&](const char* s) { return ends_with(name, s); });
        USAGE_CHECK(extra, "{}: tensor '{}' is not one of the {} model's (another model?)",
                    f.path().string(), t.name, arch.name);
        continue;
      }
      const auto [it, fresh] = where.emplace(name, f.path().string());
      USAGE_CHECK(fresh, "{}: tensor '{}' is also in {}", f.path().string(), t.name, it->second);
      params_[name] = &t;
    }
  }
  const std::string files = shards.size() == 1 ? (folder / shards[0]).string()
                                               : fmt::format("{} shards of {}", shards.size(),
                                                             (folder / kIndex).string());
  bool first = true;
  for (const ParamInfo& p : layout.params()) {
    if (is_adapter(p.role) != adapter) continue;
    const auto it = params_.find(p.name);
    USAGE_CHECK(it != params_.end(), "{}: no tensor '{}' (the {} model needs it)", files, p.name,
                arch.name);
    const TensorEntry& t = *it->second;
    USAGE_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16,
                "{}: tensor '{}' is {}, not F32, BF16 or F16", files, t.name, dtype_name(t.dtype));
    USAGE_CHECK(t.shape == p.full_shape, "{}: tensor '{}' has shape [{}] but the model's is [{}]",
                files, t.name, fmt::join(t.shape, ", "), fmt::join(p.full_shape, ", "));
    if (first) dtype_ = t.dtype, first = false;
  }
}

HfWeights::~HfWeights() = default;

namespace {

// Elements [at, at + n) of `t` as fp32.
void convert(const TensorEntry& t, int64_t at, int64_t n, float* out) {
  if (t.dtype == DType::f32) {
    std::copy_n(static_cast<const float*>(t.data) + at, n, out);
  } else if (t.dtype == DType::bf16) {
    const bf16* b = static_cast<const bf16*>(t.data) + at;
    for (int64_t i = 0; i < n; ++i) out[i] = to_float(b[i]);
  } else {
    const f16* h = static_cast<const f16*>(t.data) + at;
    for (int64_t i = 0; i < n; ++i) out[i] = to_float(h[i]);
  }
}

// Hugging Face's row (ParamSpec::hf_rows) of row `r` here, or the inverse.
int64_t hf_row(const ParamInfo& p, int64_t r, bool inverse) {
  const auto [a, b] = p.hf_rows;
  if (a == 0) return r;
  const int64_t group = p.full_shape[0] / (a * b), rest = r % group;
  if (inverse) {  // rows (j, i, rest) there are (i, j, rest) here
    const int64_t j = r / (a * group), i = r / group % a;
    return (i * b + j) * group + rest;
  }
  const int64_t i = r / (b * group), j = r / group % b;
  return (j * a + i) * group + rest;
}

}  // namespace

void HfWeights::read(const ParamInfo& p, int64_t begin, int64_t end, float* out) const {
  const TensorEntry& t = *params_.at(p.name);
  const int64_t cols = p.full_numel() / p.full_shape[0];
  for_each_whole_run(p, begin, end, [&](int64_t local, int64_t whole, int64_t count) {
    for (int64_t done = 0; done < count;) {  // a row at a time: rows may move
      const int64_t w = whole + done, c = w % cols;
      const int64_t n = p.hf_rows[0] == 0 ? count - done : std::min(count - done, cols - c);
      convert(t, hf_row(p, w / cols, false) * cols + c, n, out + (local - begin) + done);
      done += n;
    }
  });
}

void to_hf_order(const ParamLayout& layout, float* flat) {
  std::vector<float> here;
  for (const ParamInfo& p : layout.params()) {
    if (p.hf_rows[0] == 0) continue;
    const int64_t cols = p.numel / p.shape[0];
    here.assign(flat + p.offset, flat + p.offset + p.numel);
    for (int64_t r = 0; r < p.shape[0]; ++r)
      std::copy_n(here.data() + r * cols, cols, flat + p.offset + hf_row(p, r, false) * cols);
  }
}

void write_tensors(const fs::path& path, const std::vector<const ParamInfo*>& params,
                   const float* flat, DType dtype,
                   const std::function<std::string(const ParamInfo&)>& name_of) {
  SafetensorsWriter w;
  for (const ParamInfo* p : params) {
    const int64_t cols = p->numel / p->shape[0];
    w.add_generated(name_of(*p), dtype, p->shape, [=](int64_t begin, int64_t end, void* out) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = flat[p->offset + hf_row(*p, i / cols, true) * cols + i % cols];
        if (dtype == DType::f32) static_cast<float*>(out)[i - begin] = v;
        if (dtype == DType::bf16) static_cast<bf16*>(out)[i - begin] = to_bf16(v);
        if (dtype == DType::f16) {
          USAGE_CHECK(std::abs(v) <= 65504.0f || !std::isfinite(v),
                      "{}: {} = {} is beyond fp16's range (65504): export it as bf16 or fp32",
                      path.parent_path().string(), p->name, v);
          static_cast<f16*>(out)[i - begin] = to_f16(v);
        }
      }
    });
  }
  w.set_metadata("format", "pt");
  w.write(path);
}

std::vector<std::string> write_hf_weights(const fs::path& folder, const ParamLayout& layout,
                                          const float* flat, DType dtype, int64_t max_shard_bytes) {
  // Parameters in layout order, cut into shards where the next would pass the limit.
  std::vector<std::vector<const ParamInfo*>> shards(1);
  int64_t bytes = 0, total = 0;
  for (const ParamInfo& p : layout.params()) {
    const int64_t b = p.numel * int64_t(dtype_size(dtype));
    if (bytes > 0 && bytes + b > max_shard_bytes) shards.emplace_back(), bytes = 0;
    shards.back().push_back(&p);
    bytes += b, total += b;
  }
  std::vector<std::string> files;
  nlohmann::json map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    files.push_back(shards.size() == 1
                        ? std::string(kSingle)
                        : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size()));
    write_tensors(folder / files.back(), shards[s], flat, dtype,
                  [](const ParamInfo& p) { return p.name; });
    for (const ParamInfo* p : shards[s]) map[p->name] = files.back();
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    write_file_atomic(folder / kIndex, index.dump(2) + "\n");
    files.push_back(kIndex);
  }
  return files;
}

}  // namespace trainer::nn
