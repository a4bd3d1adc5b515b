#include "app/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "nn/model_io.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"
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

json state_to_json(const TrainerState& s) {
  return {{"step", s.step},
          {"tokens_seen", s.tokens_seen},
          {"world_size", s.world_size},
          {"tokenizer_hash", fmt::format("{:016x}", s.tokenizer_hash)},
          {"loader", s.loader},
          {"extra", s.extra}};
}

TrainerState state_from_json(const json& j) {
  TrainerState s;
  s.step = j.at("step").get<int64_t>();
  s.tokens_seen = j.at("tokens_seen").get<int64_t>();
  s.world_size = j.at("world_size").get<int>();
  s.tokenizer_hash = std::stoull(j.at("tokenizer_hash").get<std::string>(), nullptr, 16);
  s.loader = j.at("loader");
  s.extra = j.value("extra", json::object());
  return s;
}

uint32_t file_crc(const fs::path& p) {
  MappedFile m(p);
  return crc32(m.data(), m.size());
}

void prune(const fs::path& ckpt_root, const CheckpointPolicy& policy) {
  std::vector<std::pair<int64_t, fs::path>> steps;
  for (const auto& e : fs::directory_iterator(ckpt_root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("step-")) continue;
    if (name.ends_with(".tmp")) continue;
    steps.push_back({std::stoll(name.substr(5)), e.path()});
  }
  std::sort(steps.begin(), steps.end());
  const size_t keep_from =
      steps.size() > size_t(policy.keep_last) ? steps.size() - size_t(policy.keep_last) : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    if (policy.keep_every > 0 && steps[i].first % policy.keep_every == 0) continue;
    fs::remove_all(steps[i].second);
  }
}

}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, const nn::GPT& model, const nn::AdamW& opt,
                         const TrainerState& state, const std::string& config_yaml,
                         const CheckpointPolicy& policy) {
  const fs::path root = run_dir / "checkpoints";
  fs::create_directories(root);
  const std::string name = fmt::format("step-{}", state.step);
  const fs::path tmp = root / (name + ".tmp"), final_dir = root / name;
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  json files = json::object();
  auto record = [&](const char* file, uint32_t crc) {
    files[file] = {{"bytes", fs::file_size(tmp / file)}, {"crc32", crc}};
  };
  {
    SafetensorsWriter w;
    nn::add_params(w, model.layout(), model.params());
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
  for (auto [file, text] : {std::pair{kStateFile, state_to_json(state).dump(2) + "\n"},
                            std::pair{kConfigFile, config_yaml}}) {
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

  fs::remove_all(final_dir);  // a rerun of the same step replaces it
  fs::rename(tmp, final_dir);
  fsync_path(root);
  const fs::path link_tmp = root / "latest.tmp";
  fs::remove(link_tmp);
  fs::create_directory_symlink(name, link_tmp);
  fs::rename(link_tmp, root / "latest");
  fsync_path(root);
  prune(root, policy);
  return final_dir;
}

fs::path latest_checkpoint(const fs::path& run_dir) {
  const fs::path link = run_dir / "checkpoints" / "latest";
  std::error_code ec;
  if (!fs::is_symlink(link, ec)) return {};
  fs::path target = run_dir / "checkpoints" / fs::read_symlink(link);
  CHECK(fs::is_directory(target), "{} points at {}, which does not exist", link.string(),
        target.string());
  return target;
}

Checkpoint open_checkpoint(const fs::path& dir) {
  CHECK(fs::is_directory(dir), "checkpoint {} is not a directory", dir.string());
  Checkpoint c;
  c.dir = dir;
  try {
    c.manifest = json::parse(read_file(dir / kManifestFile));
  } catch (const json::exception& e) {
    THROW_ERROR("{}: malformed checkpoint manifest: {}", (dir / kManifestFile).string(), e.what());
  }
  CHECK(c.manifest.value("format", "") == "trainer-checkpoint",
        "{}: not a trainer checkpoint manifest", (dir / kManifestFile).string());
  CHECK(c.manifest.value("version", 0) == kFormatVersion,
        "{}: checkpoint format version {} (this trainer reads {})", (dir / kManifestFile).string(),
        c.manifest.value("version", 0), kFormatVersion);
  for (auto& [file, info] : c.manifest.at("files").items()) {
    const fs::path p = dir / file;
    CHECK(fs::exists(p), "checkpoint file {} is missing", p.string());
    CHECK(fs::file_size(p) == info.at("bytes").get<uint64_t>(),
          "checkpoint file {} has {} bytes, the manifest says {} (truncated?)", p.string(),
          fs::file_size(p), info.at("bytes").get<uint64_t>());
    CHECK(file_crc(p) == info.at("crc32").get<uint32_t>(),
          "checkpoint file {} fails its checksum (corrupted)", p.string());
  }
  try {
    c.state = state_from_json(json::parse(read_file(dir / kStateFile)));
  } catch (const json::exception& e) {
    THROW_ERROR("{}: malformed trainer state: {}", (dir / kStateFile).string(), e.what());
  }
  c.config_yaml = read_file(dir / kConfigFile);
  return c;
}

void load_checkpoint(const Checkpoint& ckpt, nn::GPT& model, nn::AdamW* opt) {
  SafetensorsFile weights(ckpt.dir / kModelFile);
  nn::load_params(weights, model.layout(), model.params());
  if (!opt) return;
  SafetensorsFile moments(ckpt.dir / kOptimizerFile);
  const int64_t begin = std::stoll(moments.metadata().at("begin"));
  const int64_t end = std::stoll(moments.metadata().at("end"));
  CHECK(begin <= opt->begin() && opt->end() <= end,
        "{}: optimizer state covers [{}, {}) but this rank needs [{}, {})", moments.path().string(),
        begin, end, opt->begin(), opt->end());
  const auto* m = static_cast<const float*>(moments.get("adamw.m").data);
  const auto* v = static_cast<const float*>(moments.get("adamw.v").data);
  opt->import_moments(m + (opt->begin() - begin), v + (opt->begin() - begin));
  opt->set_steps(std::stoll(moments.metadata().at("steps")));
}

}  // namespace trainer::app
