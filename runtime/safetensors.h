// The safetensors format (8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw data), so that checkpoints and exported
// models open in other tools. Reading maps the file and validates every range.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/file_io.h"
#include "runtime/tensor.h"

namespace trainer {

struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // host memory, valid until write()
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

// Collects tensors, then writes them in one pass. Returns the file's CRC-32.
class SafetensorsWriter {
 public:
  // Writes elements [begin, end) of a generated tensor into `out`.
  using Fill = std::function<void(int64_t begin, int64_t end, void* out)>;

  void add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data);
  // A tensor whose values `fill` produces a piece at a time while the file is written, so that
  // it never needs a host copy of its own (a copy of the optimizer state would double it).
  void add_generated(std::string name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void set_metadata(std::string key, std::string value) { metadata_[key] = std::move(value); }
  uint32_t write(const std::filesystem::path& path) const;

 private:
  std::vector<TensorEntry> entries_;
  std::vector<Fill> fills_;  // per entry; empty for one with data
  std::map<std::string, std::string> metadata_;
};

// The tensors and metadata of safetensors bytes; the tensors' data points into those bytes.
struct SafetensorsContents {
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses and validates safetensors bytes (header, dtypes, shapes, every byte range); throws a
// one-line trainer::Error naming `where` for any malformed part.
SafetensorsContents parse_safetensors(const uint8_t* bytes, size_t size, const std::string& where);

// A mapped safetensors file. Throws a one-line error naming the file for any malformed part.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  // The same over bytes already in memory (which must outlive this object), named `where`.
  SafetensorsFile(const uint8_t* bytes, size_t size, const std::string& where);
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor called `name`; throws naming the file when it is absent.
  const TensorEntry& get(const std::string& name) const;
  bool contains(const std::string& name) const;
  // The file's path (or the `where` of in-memory bytes).
  const std::filesystem::path& path() const { return where_; }

 private:
  void index();
  MappedFile file_;
  std::filesystem::path where_;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace trainer
