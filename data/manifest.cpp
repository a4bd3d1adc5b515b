// manifest.json reading and writing.
#include "data/manifest.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/json_number.h"

namespace trainer::data {

namespace fs = std::filesystem;

using nlohmann::json;

Manifest read_manifest(const fs::path& dir) {
  fs::path path = dir / kManifestName;
  std::error_code ec;
  CHECK(fs::is_regular_file(path, ec), "{}: no manifest (is {} a prepared corpus directory?)",
        path.string(), dir.string());
  Manifest m;
  try {
    json j = json::parse(read_file(path));
    CHECK(j.is_object() && j.contains("format") && j.at("format") == "trainer-shards",
          "not a trainer shard manifest");
    m.version = json_integer_at<int>(j, "version");
    CHECK(m.version == 1, "unsupported manifest version {}", m.version);
    const json& tok = j.at("tokenizer");
    m.tokenizer_file = tok.at("file").get<std::string>();
    m.tokenizer_hash = std::stoull(tok.at("hash").get<std::string>(), nullptr, 16);
    m.vocab_size = json_integer_at<uint32_t>(tok, "vocab_size");
    m.eos_id = json_integer_at<int>(tok, "eos_id");
    m.token_bytes = json_integer_at<uint32_t>(j, "token_bytes");
    m.input_format = j.at("input_format").get<std::string>();
    m.chat_template = j.value("chat_template", std::string());
    m.loss_mask = j.value("loss_mask", false);
    m.inputs = j.at("inputs").get<std::vector<std::string>>();
    m.val_fraction = j.at("val_fraction").get<double>();
    for (auto& [name, s] : j.at("splits").items()) {
      SplitInfo info;
      info.documents = json_integer_at<uint64_t>(s, "documents");
      info.tokens = json_integer_at<uint64_t>(s, "tokens");
      info.utf8_bytes = json_integer_at<uint64_t>(s, "utf8_bytes");
      for (const json& e : s.at("shards")) {
        const std::string file = e.at("file").get<std::string>();
        CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
              "shard file name '{}' is not a plain name", file);
        info.shards.push_back({file, json_integer_at<uint64_t>(e, "documents"),
                               json_integer_at<uint64_t>(e, "tokens"),
                               json_integer_at<uint64_t>(e, "bytes")});
      }
      m.splits[name] = std::move(info);
    }
  } catch (const Error& e) {
    THROW_ERROR("{}: {}", path.string(), e.what());
  } catch (const std::exception& e) {
    THROW_ERROR("{}: malformed manifest: {}", path.string(), e.what());
  }
  return m;
}

void write_manifest(const fs::path& dir, const Manifest& m) {
  json j;
  j["format"] = "trainer-shards";
  j["version"] = m.version;
  j["tokenizer"] = {{"file", m.tokenizer_file},
                    {"hash", fmt::format("{:016x}", m.tokenizer_hash)},
                    {"vocab_size", m.vocab_size},
                    {"eos_id", m.eos_id}};
  j["token_bytes"] = m.token_bytes;
  j["input_format"] = m.input_format;
  if (m.loss_mask) j["loss_mask"] = true;
  if (!m.chat_template.empty()) j["chat_template"] = m.chat_template;
  j["inputs"] = m.inputs;
  j["val_fraction"] = m.val_fraction;
  json splits = json::object();
  for (const auto& [name, s] : m.splits) {
    json shards = json::array();
    for (const ShardEntry& e : s.shards)
      shards.push_back(
          {{"file", e.file}, {"documents", e.documents}, {"tokens", e.tokens}, {"bytes", e.bytes}});
    splits[name] = {{"documents", s.documents},
                    {"tokens", s.tokens},
                    {"utf8_bytes", s.utf8_bytes},
                    {"shards", shards}};
  }
  j["splits"] = splits;
  write_file_atomic(dir / kManifestName, j.dump(2) + "\n");
}

}  // namespace trainer::data
