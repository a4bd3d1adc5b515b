#include "nn/model_io.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/ranges.h>

#include "runtime/error.h"

namespace trainer::nn {

void add_params(SafetensorsWriter& writer, const ParamLayout& layout, const void* flat, DType dtype,
                const std::string& prefix) {
  for (const ParamInfo& p : layout.params())
    writer.add(prefix + p.name, dtype, p.shape,
               static_cast<const char*>(flat) + size_t(p.offset) * dtype_size(dtype));
}

void to_hf_order(const ParamLayout& layout, float* flat) {
  std::vector<float> here;
  for (const ParamInfo& p : layout.params()) {
    const auto [a, b] = p.hf_rows;
    if (a == 0) continue;
    const int64_t rows = p.shape[0], cols = p.numel / rows, group = rows / (a * b) * cols;
    TRAINER_ASSERT(rows % (a * b) == 0, "{}: {} rows in {} x {} groups", p.name, rows, a, b);
    float* x = flat + p.offset;
    here.assign(x, x + p.numel);
    for (int64_t i = 0; i < a; ++i)    // rows (i, j, rest) here ...
      for (int64_t j = 0; j < b; ++j)  // ... are (j, i, rest) there
        std::copy_n(here.data() + (i * b + j) * group, group, x + (j * a + i) * group);
  }
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
