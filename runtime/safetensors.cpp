#include "runtime/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/json_number.h"
#include "runtime/memory.h"

namespace trainer {

namespace fs = std::filesystem;

using nlohmann::json;

namespace {

DType parse_dtype(const std::string& s) {
  for (DType t :
       {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8, DType::f16})
    if (dtype_name(t) == s) return t;
  THROW_ERROR("unsupported dtype '{}'", s);
}

// The format's rule: the tensors' bytes tile the data section, without overlaps or gaps (so a
// tensor cannot alias another's bytes, and no bytes hide between them).
void check_tiling(const std::vector<TensorEntry>& tensors,
                  std::vector<std::pair<uint64_t, uint64_t>> ranges, uint64_t data_bytes,
                  const std::string& where) {
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  uint64_t at = 0;
  const TensorEntry* before = nullptr;
  for (size_t i : order) {
    const auto [begin, end] = ranges[i];
    CHECK(begin >= at,
          "{}: tensors '{}' and '{}' share bytes [{}, {}) of the data (a safetensors file's "
          "tensors may neither overlap nor leave gaps)",
          where, before ? before->name : "", tensors[i].name, begin, std::min(at, end));
    CHECK(begin == at,
          "{}: {} bytes lie unused before tensor '{}' (a safetensors file's tensors may neither "
          "overlap nor leave gaps)",
          where, begin - at, tensors[i].name);
    at = end;
    before = &tensors[i];
  }
  CHECK(at == data_bytes,
        "{}: {} bytes lie unused after the last tensor (a safetensors file's tensors may neither "
        "overlap nor leave gaps; a file written partly over?)",
        where, data_bytes - at);
}

}  // namespace

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  entries_.push_back({std::move(name), dtype, std::move(shape), data});
  fills_.emplace_back();
}

void SafetensorsWriter::add_generated(std::string name, DType dtype, std::vector<int64_t> shape,
                                      Fill fill) {
  entries_.push_back({std::move(name), dtype, std::move(shape), nullptr});
  fills_.push_back(std::move(fill));
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
  std::vector<uint8_t> piece;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const TensorEntry& e = entries_[i];
    const size_t elem = dtype_size(e.dtype);
    if (!fills_[i]) {
      const size_t bytes = size_t(e.numel()) * elem;
      crc = crc32(e.data, bytes, crc);
      out.write(e.data, bytes);
      continue;
    }
    for_each_piece(e.numel(), [&](int64_t b, int64_t end) {
      piece.resize(size_t(end - b) * elem);
      fills_[i](b, end, piece.data());
      crc = crc32(piece.data(), piece.size(), crc);
      out.write(piece.data(), piece.size());
    });
  }
  out.commit();
  return crc;
}

SafetensorsContents parse_safetensors(const uint8_t* bytes, size_t size, const std::string& where) {
  SafetensorsContents out;
  CHECK(size >= 8, "{}: not a safetensors file (only {} bytes)", where, size);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(bytes[i]) << (8 * i);
  CHECK(n <= size - 8, "{}: truncated safetensors header ({} bytes declared, {} present)", where, n,
        size - 8);
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const json::exception& e) {
    THROW_ERROR("{}: malformed safetensors header: {}", where, e.what());
  }
  CHECK(header.is_object(), "{}: safetensors header is not a JSON object", where);
  const uint8_t* base = bytes + 8 + n;
  const uint64_t data_bytes = size - 8 - n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // each tensor's data offsets
  for (auto& [name, v] : header.items()) {
    try {
      if (name == "__metadata__") {
        CHECK(v.is_object(), "not a JSON object");
        for (auto& [k, val] : v.items()) out.metadata[k] = val.get<std::string>();
        continue;
      }
      TensorEntry e;
      e.name = name;
      CHECK(v.is_object(), "not a JSON object");
      e.dtype = parse_dtype(v.at("dtype").get<std::string>());
      CHECK(v.contains("shape") && v.at("shape").is_array(), "no shape list");
      for (const json& d : v.at("shape"))
        e.shape.push_back(json_integer<int64_t>(d, "a dimension"));
      uint64_t numel = 1;
      for (int64_t d : e.shape) {
        CHECK(d >= 0 && (d == 0 || numel <= (uint64_t(1) << 62) / uint64_t(d)),
              "an impossible shape");
        numel *= uint64_t(d);
      }
      CHECK(v.contains("data_offsets") && v.at("data_offsets").is_array() &&
                v.at("data_offsets").size() == 2,
            "not two data_offsets");
      const uint64_t off[2] = {json_integer<uint64_t>(v.at("data_offsets")[0], "an offset"),
                               json_integer<uint64_t>(v.at("data_offsets")[1], "an offset")};
      CHECK(off[0] <= off[1] && off[1] <= data_bytes,
            "its bytes lie outside the file (truncated?)");
      CHECK(off[1] - off[0] == numel * dtype_size(e.dtype),
            "{} bytes for its shape but {} in the file", numel * dtype_size(e.dtype),
            off[1] - off[0]);
      e.data = base + off[0];
      ranges.emplace_back(off[0], off[1]);
      out.tensors.push_back(std::move(e));
    } catch (const json::exception& ex) {
      THROW_ERROR("{}: entry '{}': {}", where, name, ex.what());
    } catch (const Error& ex) {
      THROW_ERROR("{}: entry '{}': {}", where, name, ex.what());
    }
  }
  check_tiling(out.tensors, ranges, data_bytes, where);
  return out;
}

SafetensorsFile::SafetensorsFile(const fs::path& path) : file_(path), where_(path) {
  SafetensorsContents c = parse_safetensors(file_.data(), file_.size(), path.string());
  tensors_ = std::move(c.tensors);
  metadata_ = std::move(c.metadata);
  index();
}

SafetensorsFile::SafetensorsFile(const uint8_t* bytes, size_t size, const std::string& where)
    : where_(where) {
  SafetensorsContents c = parse_safetensors(bytes, size, where);
  tensors_ = std::move(c.tensors);
  metadata_ = std::move(c.metadata);
  index();
}

void SafetensorsFile::index() {
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

bool SafetensorsFile::contains(const std::string& name) const {
  return index_.count(name) > 0;
}

const TensorEntry& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  CHECK(it != index_.end(), "{}: no tensor named '{}'", where_.string(), name);
  return tensors_[it->second];
}

}  // namespace trainer
