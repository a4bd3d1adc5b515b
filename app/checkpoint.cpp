#include "app/checkpoint.h"
#include "app/checkpoint_files.h"

#include "data/loader.h"
#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/json_number.h"

namespace trainer::app {

namespace fs = std::filesystem;

using nlohmann::json;

json parse_checkpoint_manifest(const std::string& text, const std::string& where) {
  try {
    const json m = json::parse(text);
    CHECK(m.is_object() && m.contains("format") && m.at("format") == "trainer-checkpoint",
          "not a trainer checkpoint manifest");
    const int version = json_integer_at<int>(m, "version");
    CHECK(kOldestReadable <= version && version <= kFormatVersion,
          "checkpoint format version {} (this trainer reads {} to {})", version, kOldestReadable,
          kFormatVersion);
    CHECK(json_integer_at<int64_t>(m, "step") >= 0, "negative step");
    CHECK(m.contains("files") && m.at("files").is_object(), "'files' is not an object");
    const json& files = m.at("files");
    for (auto& [file, info] : files.items()) {
      CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
            "file name '{}' is not a plain name", file);
      json_integer_at<uint64_t>(info, "bytes");
      json_integer_at<uint32_t>(info, "crc32");
    }
    for (const char* required : {kStateFile, kConfigFile})
      CHECK(files.contains(required), "the manifest does not list {} (not a complete checkpoint)",
            required);
    if (!m.contains("shards")) {
      for (const char* required : {kModelFile, kOptimizerFile})
        CHECK(files.contains(required), "the manifest does not list {} (not a complete checkpoint)",
              required);
      return m;
    }
    CHECK(m.at("shards").is_array() && !m.at("shards").empty(), "'shards' is not a list");
    if (version >= 2)
      CHECK(m.contains("stage") && m.at("stage").is_string(),
            "a sharded checkpoint names no stage");
    const int tensor =
        m.contains("tensor_parallel") ? json_integer_at<int>(m, "tensor_parallel") : 1;
    CHECK(tensor >= 1, "tensor_parallel = {} is not a degree", tensor);
    for (const json& shard : m.at("shards")) {
      CHECK(shard.is_object() && shard.contains("file") && shard.at("file").is_string() &&
                files.contains(shard.at("file").get<std::string>()),
            "a shard names no file the manifest lists");
      if (shard.contains("rank")) CHECK(json_integer_at<int>(shard, "rank") >= 0, "negative rank");
      const int tr = shard.contains("tensor_rank") ? json_integer_at<int>(shard, "tensor_rank") : 0;
      CHECK(0 <= tr && tr < tensor, "tensor_rank {} of {}", tr, tensor);
      CHECK(shard.contains("ranges") && shard.at("ranges").is_array(), "a shard has no ranges");
      for (const json& r : shard.at("ranges")) {
        CHECK(r.is_array() && r.size() == 3, "a shard range is not [begin, end, offset]");
        const int64_t b = json_integer<int64_t>(r[0], "range begin"),
                      e = json_integer<int64_t>(r[1], "range end"),
                      at = json_integer<int64_t>(r[2], "range offset");
        CHECK(0 <= b && b <= e && at >= 0, "shard range [{}, {}) at {} is not possible", b, e, at);
      }
    }
    return m;
  } catch (const std::exception& e) {  // json errors and our own checks
    THROW_ERROR("{}: malformed checkpoint manifest: {}", where, e.what());
  }
}

TrainerState parse_trainer_state(const std::string& text, const std::string& where) {
  try {
    const json j = json::parse(text);
    TrainerState s;
    s.step = json_integer_at<int64_t>(j, "step");
    s.tokens_seen = json_integer_at<int64_t>(j, "tokens_seen");
    s.world_size = json_integer_at<int>(j, "world_size");
    auto hex = [&](const char* key) {
      const std::string text = j.at(key).get<std::string>();
      size_t used = 0;
      const uint64_t v = text.empty() ? 0 : std::stoull(text, &used, 16);
      CHECK(used == text.size() && !text.empty(), "{} '{}' is not hexadecimal", key, text);
      return v;
    };
    s.tokenizer_hash = hex("tokenizer_hash");
    s.data_hash = j.contains("data_hash") ? hex("data_hash") : 0;
    s.threads = j.contains("threads") ? json_integer_at<int>(j, "threads") : 0;
    s.tensor_parallel =
        j.contains("tensor_parallel") ? json_integer_at<int>(j, "tensor_parallel") : 1;
    s.pipeline_parallel =
        j.contains("pipeline_parallel") ? json_integer_at<int>(j, "pipeline_parallel") : 1;
    s.loader = j.at("loader");
    s.loader.get<data::LoaderState>();  // must be one
    if (j.contains("hosts")) s.hosts = j.at("hosts").get<std::vector<std::string>>();
    if (j.contains("spike_guard")) {  // SpikeGuard::state(): two windows of numbers
      s.spike_guard = j.at("spike_guard");
      s.spike_guard.at("losses").get<std::vector<double>>();
      s.spike_guard.at("grad_norms").get<std::vector<double>>();
    }
    CHECK(s.hosts.empty() || int(s.hosts.size()) == s.world_size,
          "hosts names {} ranks but world_size is {}", s.hosts.size(), s.world_size);
    CHECK(s.step >= 0 && s.tokens_seen >= 0 && s.world_size >= 1 && s.tensor_parallel >= 1 &&
              s.pipeline_parallel >= 1 &&
              s.world_size % (s.tensor_parallel * s.pipeline_parallel) == 0,
          "step {}, tokens_seen {}, world_size {}, tensor_parallel {}, pipeline_parallel {} are "
          "not possible",
          s.step, s.tokens_seen, s.world_size, s.tensor_parallel, s.pipeline_parallel);
    return s;
  } catch (const std::exception& e) {  // json errors, stoull, our own checks
    THROW_ERROR("{}: malformed trainer state: {}", where, e.what());
  }
}

Checkpoint open_checkpoint(const fs::path& dir) {
  CHECK(fs::is_directory(dir), "checkpoint {} is not a directory", dir.string());
  Checkpoint c;
  c.dir = dir;
  const std::string manifest_path = (dir / kManifestFile).string();
  c.manifest = parse_checkpoint_manifest(read_file(dir / kManifestFile), manifest_path);
  // Every file is mapped once and read from that mapping from here on, so a checkpoint that a
  // live run prunes while it is read stays whole for its reader (Note [Live readers]).
  for (auto& [file, info] : c.manifest.at("files").items()) {
    const fs::path p = dir / file;
    const uint64_t bytes = json_integer_at<uint64_t>(info, "bytes");
    CHECK(fs::exists(p), "checkpoint file {} is missing", p.string());
    auto mapped = std::make_shared<const MappedFile>(p);
    CHECK(mapped->size() == bytes,
          "checkpoint file {} has {} bytes, the manifest says {} (truncated?)", p.string(),
          mapped->size(), bytes);
    CHECK(crc32(mapped->data(), mapped->size()) == json_integer_at<uint32_t>(info, "crc32"),
          "checkpoint file {} fails its checksum (corrupted)", p.string());
    c.files[file] = std::move(mapped);
  }
  c.state = parse_trainer_state(std::string(c.bytes(kStateFile)), (dir / kStateFile).string());
  const int64_t manifest_step = json_integer_at<int64_t>(c.manifest, "step");
  CHECK(manifest_step == c.state.step, "{}: the manifest is for step {} but {} says step {}",
        manifest_path, manifest_step, kStateFile, c.state.step);
  for (const char* file : kTokenizerFiles) {
    if (!c.files.contains(file)) continue;
    c.tokenizer = dir / file;
    CHECK(data::tokenizer_is(c.bytes(file), c.state.tokenizer_hash),
          "{}: the tokenizer does not match the trainer state's tokenizer hash {:016x}",
          c.tokenizer.string(), c.state.tokenizer_hash);
  }
  c.config_yaml = c.bytes(kConfigFile);
  return c;
}

std::string_view Checkpoint::bytes(const std::string& file) const {
  auto it = files.find(file);
  TRAINER_ASSERT(it != files.end(), "{} is not a file of checkpoint {}", file, dir.string());
  return {reinterpret_cast<const char*>(it->second->data()), it->second->size()};
}

Checkpoint open_checkpoint_of(const fs::path& dir) {
  CHECK(fs::is_directory(dir), "{} is not a directory (a checkpoint or a run directory)",
        dir.string());
  if (fs::exists(dir / kManifestFile)) return open_checkpoint(dir);
  // A live run's checkpoint can be pruned between resolving `latest` and mapping its files
  // (a save never prunes what `latest` names, so the link has moved on by then): the newer one
  // is read instead.
  for (int attempt = 1;; ++attempt) {
    const fs::path latest = latest_checkpoint(dir);
    CHECK(!latest.empty(), "{} is neither a checkpoint nor a run directory with checkpoints",
          dir.string());
    try {
      return open_checkpoint(latest);
    } catch (const Error&) {
      if (attempt == 10 || latest_checkpoint(dir) == latest) throw;
    }
  }
}

}  // namespace trainer::app
