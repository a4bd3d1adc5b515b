#include "nn/model_io.h"

#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "runtime/error.h"

namespace trainer::nn {

void add_params(SafetensorsWriter& writer, const ParamLayout& layout, const void* flat, DType dtype,
                const std::string& prefix) {
  for (const ParamInfo& p : layout.params())
    writer.add(prefix + p.name, dtype, p.shape,
               static_cast<const char*>(flat) + size_t(p.offset) * dtype_size(dtype));
}

void load_params(const SafetensorsFile& file, const ParamLayout& layout, float* flat,
                 const std::string& prefix) {
  const std::string where = file.path().string();
  for (const ParamInfo& p : layout.params()) {
    const std::string name = prefix + p.name;
    CHECK(file.contains(name), "{}: no tensor '{}' (a checkpoint of another model?)", where, name);
    const TensorEntry& t = file.get(name);
    CHECK(t.dtype == DType::f32, "{}: tensor '{}' is {}, expected F32", where, name,
          dtype_name(t.dtype));
    CHECK(t.shape == p.shape, "{}: tensor '{}' has shape [{}] but the model expects [{}]", where,
          name, fmt::join(t.shape, ", "), fmt::join(p.shape, ", "));
    std::memcpy(flat + p.offset, t.data, size_t(p.numel) * sizeof(float));
  }
}

}  // namespace trainer::nn
