#include "runtime/safetensors.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace trainer {

using nlohmann::json;

namespace {

DType parse_dtype(const std::string& s, const fs::path& path) {
  for (DType t : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8})
    if (dtype_name(t) == s) return t;
  THROW_ERROR("{}: unsupported safetensors dtype '{}'", path.string(), s);
}

}  // namespace

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  entries_.push_back({std::move(name), dtype, std::move(shape), data});
}

uint32_t SafetensorsWriter::write(const fs::path& path) const {
  json header = json::object();
  uint64_t offset = 0;
  for (const TensorEntry& e : entries_) {
    uint64_t bytes = uint64_t(e.numel()) * dtype_size(e.dtype);
    header[e.name] = {{"dtype", std::string(dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  uint64_t n = text.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));

  OutputFile out(path);
  uint32_t crc = crc32(len, 8);
  out.write(len, 8);
  crc = crc32(text.data(), text.size(), crc);
  out.write(text.data(), text.size());
  for (const TensorEntry& e : entries_) {
    size_t bytes = size_t(e.numel()) * dtype_size(e.dtype);
    crc = crc32(e.data, bytes, crc);
    out.write(e.data, bytes);
  }
  out.commit();
  return crc;
}

SafetensorsFile::SafetensorsFile(const fs::path& path) : file_(path) {
  const std::string where = path.string();
  CHECK(file_.size() >= 8, "{}: not a safetensors file (only {} bytes)", where, file_.size());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(file_.data()[i]) << (8 * i);
  CHECK(n <= file_.size() - 8, "{}: truncated safetensors header ({} bytes declared, {} present)",
        where, n, file_.size() - 8);
  json header;
  try {
    header = json::parse(file_.data() + 8, file_.data() + 8 + n);
  } catch (const json::exception& e) {
    THROW_ERROR("{}: malformed safetensors header: {}", where, e.what());
  }
  CHECK(header.is_object(), "{}: safetensors header is not a JSON object", where);
  const uint8_t* base = file_.data() + 8 + n;
  const uint64_t data_bytes = file_.size() - 8 - n;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, val] : v.items()) metadata_[k] = val.get<std::string>();
      continue;
    }
    try {
      TensorEntry e;
      e.name = name;
      e.dtype = parse_dtype(v.at("dtype").get<std::string>(), path);
      e.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_bytes,
            "{}: tensor '{}' lies outside the file (truncated?)", where, name);
      CHECK(off[1] - off[0] == uint64_t(e.numel()) * dtype_size(e.dtype),
            "{}: tensor '{}' has {} bytes for its shape but {} in the file", where, name,
            uint64_t(e.numel()) * dtype_size(e.dtype), off[1] - off[0]);
      e.data = base + off[0];
      index_[name] = tensors_.size();
      tensors_.push_back(std::move(e));
    } catch (const json::exception& ex) {
      THROW_ERROR("{}: malformed entry for tensor '{}': {}", where, name, ex.what());
    }
  }
}

bool SafetensorsFile::contains(const std::string& name) const {
  return index_.count(name) > 0;
}

const TensorEntry& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  CHECK(it != index_.end(), "{}: no tensor named '{}'", file_.path().string(), name);
  return tensors_[it->second];
}

}  // namespace trainer
