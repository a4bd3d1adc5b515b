#include "app/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "data/loader.h"
#include "data/tokenizer.h"
#include "nn/model_io.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/json_number.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/safetensors.h"

namespace trainer::app {

using nlohmann::json;

namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kConfigFile = "config.yaml";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kTokenizerFile = "tokenizer.model";

json state_to_json(const TrainerState& s) {
  return {{"step", s.step},
          {"tokens_seen", s.tokens_seen},
          {"world_size", s.world_size},
          {"tokenizer_hash", fmt::format("{:016x}", s.tokenizer_hash)},
          {"data_hash", fmt::format("{:016x}", s.data_hash)},
          {"loader", s.loader}};
}

uint32_t file_crc(const fs::path& p) {
  MappedFile m(p);
  return crc32(m.data(), m.size());
}

// The step of a directory named exactly "step-<digits>", or -1.
int64_t step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!name.starts_with("step-")) return -1;
  int64_t step = -1;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && end == last && first != last ? step : -1;
}

// Points `latest` at `name` (a directory in root) atomically.
void point_latest(const fs::path& root, const std::string& name) {
  const fs::path link_tmp = root / "latest.tmp";
  fs::remove(link_tmp);
  fs::create_directory_symlink(name, link_tmp);
  fs::rename(link_tmp, root / "latest");
  fsync_path(root);
}

// Removes checkpoints older than `current` beyond the newest keep_last (sparing keep_every
// multiples), and half-written ".tmp" directories left by a killed save. Never touches
// `current`, anything newer, or what `latest` points at.
void prune(const fs::path& root, int64_t current, const CheckpointPolicy& policy) {
  std::vector<std::pair<int64_t, fs::path>> older;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory() || e.is_symlink()) continue;
    const std::string name = e.path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".tmp")) {
      if (name != fs::read_symlink(root / "latest").string()) fs::remove_all(e.path());
      continue;
    }
    const int64_t step = step_of(e.path());
    if (step >= 0 && step < current) older.push_back({step, e.path()});
  }
  std::sort(older.begin(), older.end());
  const size_t keep_older = size_t(std::max<int64_t>(0, policy.keep_last - 1));
  const size_t drop = older.size() > keep_older ? older.size() - keep_older : 0;
  for (size_t i = 0; i < drop; ++i) {
    if (policy.keep_every > 0 && older[i].first % policy.keep_every == 0) continue;
    fs::remove_all(older[i].second);
  }
}

// The fp32 masters in host memory: the model's own buffer on the CPU, else a copy.
const float* host_params(nn::Model& model, std::vector<float>& staging) {
  const Tensor p = model.params();
  if (p.device == Device::cpu) return p.as<float>();
  staging = read_as_f32(model.context(), p);
  return staging.data();
}

}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, nn::Model& model, const nn::AdamW& opt,
                         const TrainerState& state, const std::string& config_yaml,
                         std::string_view tokenizer, const CheckpointPolicy& policy) {
  const fs::path root = run_dir / "checkpoints";
  fs::create_directories(root);
  const std::string name = fmt::format("step-{}", state.step);
  const fs::path tmp = root / (name + ".tmp"), final_dir = root / name;
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  RemoveUnlessKept litter(tmp);  // a failed write (a full disk) leaves no half checkpoint

  json files = json::object();
  auto record = [&](const char* file, uint32_t crc) {
    files[file] = {{"bytes", fs::file_size(tmp / file)}, {"crc32", crc}};
  };
  {
    SafetensorsWriter w;
    std::vector<float> staging;
    nn::add_params(w, model.layout(), host_params(model, staging));
    w.set_metadata("format", "pt");
    record(kModelFile, w.write(tmp / kModelFile));
  }
  {
    // Moments as global flat ranges: any world size or shard can read the part it owns.
    SafetensorsWriter w;
    const int64_t n = opt.end() - opt.begin();
    std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    opt.export_moments(m.data(), v.data());
    w.add("adamw.m", DType::f32, {n}, m.data());
    w.add("adamw.v", DType::f32, {n}, v.data());
    w.set_metadata("begin", std::to_string(opt.begin()));
    w.set_metadata("end", std::to_string(opt.end()));
    w.set_metadata("steps", std::to_string(opt.steps()));
    record(kOptimizerFile, w.write(tmp / kOptimizerFile));
  }
  const std::string state_text = state_to_json(state).dump(2) + "\n";
  for (auto [file, text] : {std::pair{kStateFile, std::string_view(state_text)},
                            std::pair{kConfigFile, std::string_view(config_yaml)},
                            std::pair{kTokenizerFile, tokenizer}}) {
    if (file == kTokenizerFile && tokenizer.empty()) continue;
    OutputFile out(tmp / file);
    out.write(text.data(), text.size());
    out.commit();
    record(file, crc32(text.data(), text.size()));
  }
  json manifest = {{"format", "trainer-checkpoint"},
                   {"version", kFormatVersion},
                   {"step", state.step},
                   {"layout_digest", fmt::format("{:016x}", model.layout().digest())},
                   {"files", files}};
  write_file_atomic(tmp / kManifestFile, manifest.dump(2) + "\n");
  fsync_path(tmp);

  // `latest` moves to the complete temporary first, then to its final name, so that from the
  // first complete checkpoint on it always names a whole one (even when a checkpoint of the
  // same step is being replaced).
  litter.keep();
  point_latest(root, name + ".tmp");
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(root);
  point_latest(root, name);
  prune(root, state.step, policy);
  return final_dir;
}

fs::path latest_checkpoint(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints", link = root / "latest";
  std::error_code ec;
  if (!fs::is_symlink(link, ec)) {
    if (fs::is_directory(root, ec))
      for (const auto& e : fs::directory_iterator(root))
        CHECK(step_of(e.path()) < 0,
              "{} holds checkpoints but no 'latest' link; pass train.resume=<checkpoint dir> "
              "(or none to start afresh)",
              root.string());
    return {};
  }
  const std::string name = fs::read_symlink(link).string();
  fs::path target = root / name;
  // A save killed between renaming step-N.tmp to step-N and repointing `latest` leaves the
  // link naming the temporary: the complete checkpoint is under its final name.
  if (!fs::is_directory(target) && name.ends_with(".tmp") &&
      fs::is_directory(root / name.substr(0, name.size() - 4))) {
    target = root / name.substr(0, name.size() - 4);
    point_latest(root, target.filename().string());
  }
  CHECK(fs::is_directory(target), "{} points at {}, which does not exist", link.string(),
        target.string());
  return target;
}

void repoint_latest(const fs::path& run_dir, const fs::path& checkpoint) {
  point_latest(run_dir / "checkpoints", checkpoint.filename().string());
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  const fs::path root = run_dir / "checkpoints";
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && !e.is_symlink() && step_of(e.path()) >= 0)
      out.push_back({step_of(e.path()), e.path()});
  std::sort(out.begin(), out.end());
  return out;
}

fs::path checkpoint_dir_of(const fs::path& dir) {
  CHECK(fs::is_directory(dir), "{} is not a directory (a checkpoint or a run directory)",
        dir.string());
  if (fs::exists(dir / kManifestFile)) return dir;
  const fs::path latest = latest_checkpoint(dir);
  CHECK(!latest.empty(), "{} is neither a checkpoint nor a run directory with checkpoints",
        dir.string());
  return latest;
}

json parse_checkpoint_manifest(const std::string& text, const std::string& where) {
  try {
    const json m = json::parse(text);
    CHECK(m.is_object() && m.contains("format") && m.at("format") == "trainer-checkpoint",
          "not a trainer checkpoint manifest");
    const int version = json_integer_at<int>(m, "version");
    CHECK(version == kFormatVersion, "checkpoint format version {} (this trainer reads {})",
          version, kFormatVersion);
    CHECK(json_integer_at<int64_t>(m, "step") >= 0, "negative step");
    CHECK(m.contains("files") && m.at("files").is_object(), "'files' is not an object");
    const json& files = m.at("files");
    for (auto& [file, info] : files.items()) {
      CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
            "file name '{}' is not a plain name", file);
      json_integer_at<uint64_t>(info, "bytes");
      json_integer_at<uint32_t>(info, "crc32");
    }
    for (const char* required : {kModelFile, kOptimizerFile, kStateFile, kConfigFile})
      CHECK(files.contains(required), "the manifest does not list {} (not a complete checkpoint)",
            required);
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
    s.loader = j.at("loader");
    s.loader.get<data::LoaderState>();  // must be one
    CHECK(s.step >= 0 && s.tokens_seen >= 0 && s.world_size >= 1,
          "step {}, tokens_seen {}, world_size {} are not possible", s.step, s.tokens_seen,
          s.world_size);
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
  for (auto& [file, info] : c.manifest.at("files").items()) {
    const fs::path p = dir / file;
    const uint64_t bytes = json_integer_at<uint64_t>(info, "bytes");
    CHECK(fs::exists(p), "checkpoint file {} is missing", p.string());
    CHECK(fs::file_size(p) == bytes,
          "checkpoint file {} has {} bytes, the manifest says {} (truncated?)", p.string(),
          fs::file_size(p), bytes);
    CHECK(file_crc(p) == json_integer_at<uint32_t>(info, "crc32"),
          "checkpoint file {} fails its checksum (corrupted)", p.string());
  }
  c.state = parse_trainer_state(read_file(dir / kStateFile), (dir / kStateFile).string());
  const int64_t manifest_step = json_integer_at<int64_t>(c.manifest, "step");
  CHECK(manifest_step == c.state.step, "{}: the manifest is for step {} but {} says step {}",
        manifest_path, manifest_step, kStateFile, c.state.step);
  if (c.manifest.at("files").contains(kTokenizerFile)) {
    c.tokenizer = dir / kTokenizerFile;
    CHECK(data::tokenizer_file_hash(c.tokenizer) == c.state.tokenizer_hash,
          "{}: the tokenizer does not match the trainer state's tokenizer hash {:016x}",
          c.tokenizer.string(), c.state.tokenizer_hash);
  }
  c.config_yaml = read_file(dir / kConfigFile);
  return c;
}

void load_checkpoint(const Checkpoint& ckpt, nn::Model& model, nn::AdamW* opt) {
  SafetensorsFile weights(ckpt.dir / kModelFile);
  const Tensor params = model.params();
  std::vector<float> host(params.device == Device::cpu ? 0 : size_t(params.numel()));
  nn::load_params(weights, model.layout(), host.empty() ? params.as<float>() : host.data());
  if (!host.empty())
    copy(model.context(), params, make_tensor(host.data(), DType::f32, {params.numel()}));
  model.sync_working_params();
  if (!opt) return;
  SafetensorsFile moments(ckpt.dir / kOptimizerFile);
  auto metadata_int = [&](const char* key) {
    auto it = moments.metadata().find(key);
    int64_t v = 0;
    bool ok = it != moments.metadata().end();
    if (ok) {
      const std::string& text = it->second;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      ok = ec == std::errc() && end == text.data() + text.size();
    }
    CHECK(ok, "{}: missing or malformed metadata '{}'", moments.path().string(), key);
    return v;
  };
  const int64_t begin = metadata_int("begin"), end = metadata_int("end"),
                steps = metadata_int("steps");
  CHECK(0 <= begin && begin <= end && end <= model.layout().total(),
        "{}: optimizer range [{}, {}) lies outside the model's {} parameters",
        moments.path().string(), begin, end, model.layout().total());
  CHECK(0 <= steps && steps <= ckpt.state.step,
        "{}: {} optimizer steps recorded at training step {}", moments.path().string(), steps,
        ckpt.state.step);
  CHECK(begin <= opt->begin() && opt->end() <= end,
        "{}: optimizer state covers [{}, {}) but this rank needs [{}, {})", moments.path().string(),
        begin, end, opt->begin(), opt->end());
  for (const char* name : {"adamw.m", "adamw.v"}) {
    const TensorEntry& t = moments.get(name);
    CHECK(t.dtype == DType::f32 && t.shape == std::vector<int64_t>{end - begin},
          "{}: tensor '{}' does not cover [{}, {})", moments.path().string(), name, begin, end);
  }
  const auto* m = static_cast<const float*>(moments.get("adamw.m").data);
  const auto* v = static_cast<const float*>(moments.get("adamw.v").data);
  opt->import_moments(m + (opt->begin() - begin), v + (opt->begin() - begin));
  opt->set_steps(steps);
}

}  // namespace trainer::app
