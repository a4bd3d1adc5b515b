#include "app/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/ranges.h>

#include "data/loader.h"
#include "data/tokenizer.h"
#include "dist/sharding.h"
#include "nn/model_io.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/json_number.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/safetensors.h"

namespace trainer::app {

namespace fs = std::filesystem;

using nlohmann::json;

namespace {

// Version 2 adds each tensor file's own header (step, and a shard's rank, world, stage and
// ranges; Note [Self-describing files]) and the retention policy the checkpoint was written
// under; version 1 checkpoints still load, without those cross-checks.
constexpr int kFormatVersion = 2;
constexpr int kOldestReadable = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kConfigFile = "config.yaml";
constexpr const char* kManifestFile = kCheckpointManifest;
constexpr const char* kTokenizerFile = "tokenizer.model";

json state_to_json(const TrainerState& s) {
  return {{"step", s.step},
          {"tokens_seen", s.tokens_seen},
          {"world_size", s.world_size},
          {"tokenizer_hash", fmt::format("{:016x}", s.tokenizer_hash)},
          {"data_hash", fmt::format("{:016x}", s.data_hash)},
          {"loader", s.loader},
          {"threads", s.threads}};
}

// Adds `shape` fp32 elements of the flat tensor `flat` from `offset` on: in place when it is
// in host memory, else copied a piece at a time as the file is written (a whole host copy of a
// device's masters would add 4 bytes per parameter to every save).
void add_f32(SafetensorsWriter& w, std::string name, std::vector<int64_t> shape, const Context& ctx,
             const Tensor& flat, int64_t offset) {
  if (flat.device == Device::cpu) {
    w.add(std::move(name), DType::f32, std::move(shape), flat.as<float>() + offset);
    return;
  }
  w.add_generated(std::move(name), DType::f32, std::move(shape),
                  [&ctx, flat, offset](int64_t b, int64_t e, void* out) {
                    const std::vector<float> v = read_as_f32(ctx, flat.flat(offset + b, e - b));
                    std::memcpy(out, v.data(), v.size() * sizeof(float));
                  });
}

std::string shard_file(int rank, int world) {
  return fmt::format("shard-{:05d}-of-{:05d}.safetensors", rank, world);
}

// A test's way to make a save slow (TRAINER_TEST_SAVE_DELAY_S seconds on rank 0), standing in
// for a slow file system: the save must outlast dist.timeout_s without failing.
void test_save_delay(int rank) {
  const char* env = std::getenv("TRAINER_TEST_SAVE_DELAY_S");
  if (env && rank == 0) std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(env)));
}

// The ranks' agreement after a phase of a save: waits for every rank under the save's own
// deadline (naming a rank that is late), then throws on every rank if any failed; a rank's
// own error is its message.
void agree(dist::Communicator& comm, const std::string& error, double timeout_s,
           const std::string& what) {
  if (comm.size() == 1) {
    CHECK(error.empty(), "{}", error);
    return;
  }
  try {
    comm.barrier(timeout_s);
  } catch (const Error& e) {
    THROW_ERROR("checkpoint save: {} (checkpoint.timeout_s = {} s)", e.what(), timeout_s);
  }
  const std::vector<int64_t> failed = comm.all_gather(std::vector<int64_t>{error.empty() ? 0 : 1});
  CHECK(error.empty(), "{}", error);
  for (int r = 0; r < comm.size(); ++r)
    CHECK(failed[size_t(r)] == 0, "checkpoint save: rank {} failed to {} (its log says why)", r,
          what);
}

// AdamW's first (or, with `second`, second) moments over this rank's local flat buffer (its
// slices at their local offsets, zero elsewhere), a piece at a time as the file is written:
// a whole copy of both would add 2 x 4 bytes per parameter to the run's memory at every save.
SafetensorsWriter::Fill moments_fill(dist::DataParallel& dp, bool second) {
  return [&dp, second](int64_t begin, int64_t end, void* out) {
    float* dst = static_cast<float*>(out);
    std::fill(dst, dst + (end - begin), 0.0f);
    std::vector<float> other;
    for (const nn::FlatSlice& sl : dp.slices()) {
      const int64_t b = std::max(begin, sl.local), e = std::min(end, sl.local + sl.size());
      if (b >= e) continue;
      other.resize(size_t(e - b));
      float* mine = dst + (b - begin);
      const int64_t g = sl.begin + (b - sl.local);
      if (second)
        dp.optimizer().export_moments(g, g + (e - b), other.data(), mine);
      else
        dp.optimizer().export_moments(g, g + (e - b), mine, other.data());
    }
  };
}

// The global flat ranges rank `rank` of `world` holds in a sharded checkpoint, as
// [begin, end, offset in the shard's tensors].
json shard_ranges(const nn::ParamLayout& layout, int world, int rank) {
  const dist::ShardGeometry geo(layout, world, rank);
  json ranges = json::array();
  for (size_t u = 0; u < geo.units().size(); ++u)
    if (const nn::FlatSlice sl = geo.slice(int(u), rank); sl.size() > 0)
      ranges.push_back({sl.begin, sl.end, sl.local});
  return ranges;
}

// Note [Sharded checkpoints]
// A sharded run's rank r writes shard-r-of-N.safetensors: its local masters ("params") and
// moments ("adamw.m", "adamw.v"), padding included, as held in memory; the manifest lists
// each shard's global flat ranges [begin, end) and where each starts in the file's tensors.
// Reading takes any global range from whichever files hold it, so a checkpoint loads at
// any world size and stage, and into a whole model for eval and export, one slice at a time.
//
// Note [Self-describing files]
// Each tensor file also says what it is in its own header: the training step, and a shard its
// rank, the world size, the sharding stage and its ranges. Loading checks them against the
// manifest and the trainer state, so a shard copied from another step or checkpoint, or two
// shard names swapped in the manifest, are refused by name instead of loading other or
// permuted weights (the CRC-32s cannot tell: they describe whatever files are there).
uint32_t write_shard(const fs::path& path, dist::DataParallel& dp, const nn::Model& model,
                     const TrainerState& state, int rank, int world) {
  const Tensor masters = dp.masters();
  const int64_t n = masters.numel();
  SafetensorsWriter w;
  add_f32(w, "params", {n}, model.context(), masters, 0);
  w.add_generated("adamw.m", DType::f32, {n}, moments_fill(dp, false));
  w.add_generated("adamw.v", DType::f32, {n}, moments_fill(dp, true));
  w.set_metadata("steps", std::to_string(dp.optimizer().steps()));
  w.set_metadata("step", std::to_string(state.step));
  w.set_metadata("rank", std::to_string(rank));
  w.set_metadata("world", std::to_string(world));
  w.set_metadata("stage", dist::sharding_stage_name(dp.stage()));
  w.set_metadata("ranges", shard_ranges(model.layout(), world, rank).dump());
  return w.write(path);
}

// The whole state, as a replicated run's rank 0 holds it.
void write_whole(const fs::path& dir, nn::Model& model, dist::DataParallel& dp,
                 const TrainerState& state, json& files) {
  auto record = [&](const char* file, uint32_t crc) {
    files[file] = {{"bytes", fs::file_size(dir / file)}, {"crc32", crc}};
  };
  {
    SafetensorsWriter w;  // Hugging Face names (rows in the trainer's order; export reorders)
    for (const nn::ParamInfo& p : model.layout().params())
      add_f32(w, p.name, p.shape, model.context(), dp.masters(), p.offset);
    w.set_metadata("format", "pt");
    w.set_metadata("step", std::to_string(state.step));
    record(kModelFile, w.write(dir / kModelFile));
  }
  const int64_t n = model.layout().total();
  SafetensorsWriter w;
  w.add_generated("adamw.m", DType::f32, {n}, moments_fill(dp, false));
  w.add_generated("adamw.v", DType::f32, {n}, moments_fill(dp, true));
  w.set_metadata("begin", "0");
  w.set_metadata("end", std::to_string(n));
  w.set_metadata("steps", std::to_string(dp.optimizer().steps()));
  w.set_metadata("step", std::to_string(state.step));
  record(kOptimizerFile, w.write(dir / kOptimizerFile));
}

}  // namespace

fs::path save_checkpoint(dist::Communicator& comm, const fs::path& run_dir, nn::Model& model,
                         dist::DataParallel& dp, const TrainerState& state,
                         const std::string& config_yaml, std::string_view tokenizer,
                         const SaveOptions& options) {
  const fs::path root = run_dir / "checkpoints";
  const std::string name = fmt::format("step-{}", state.step);
  const fs::path tmp = root / (name + ".tmp"), final_dir = root / name;
  const bool leader = comm.rank() == 0, sharded = dp.stage() != dist::ShardingStage::none;
  std::string error;
  auto attempt = [&](auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  std::optional<RemoveUnlessKept> litter;  // a failed save leaves no half checkpoint
  if (leader)
    attempt([&] {
      fs::create_directories(root);
      fs::remove_all(tmp);
      fs::create_directories(tmp);
      litter.emplace(tmp);
    });
  agree(comm, error, options.timeout_s, "create " + tmp.string());

  // Every rank's tensors, in parallel (a replicated run's are all rank 0's).
  std::vector<int64_t> shard_info = {0, 0};  // crc, bytes
  test_save_delay(comm.rank());
  json files = json::object();
  attempt([&] {
    if (sharded) {
      const fs::path path = tmp / shard_file(comm.rank(), comm.size());
      shard_info = {int64_t(write_shard(path, dp, model, state, comm.rank(), comm.size())),
                    int64_t(fs::file_size(path))};
    } else if (leader) {
      write_whole(tmp, model, dp, state, files);
    }
  });
  agree(comm, error, options.timeout_s, "write its part of " + tmp.string());
  const std::vector<int64_t> all_info =
      sharded ? comm.all_gather(shard_info) : std::vector<int64_t>{};

  if (leader)
    attempt([&] {
      json shards = json::array();
      if (sharded)
        for (int r = 0; r < comm.size(); ++r) {
          const std::string file = shard_file(r, comm.size());
          files[file] = {{"bytes", all_info[size_t(2 * r + 1)]},
                         {"crc32", all_info[size_t(2 * r)]}};
          shards.push_back(
              {{"file", file}, {"ranges", shard_ranges(model.layout(), comm.size(), r)}});
        }
      const std::string state_text = state_to_json(state).dump(2) + "\n";
      for (auto [file, text] : {std::pair{kStateFile, std::string_view(state_text)},
                                std::pair{kConfigFile, std::string_view(config_yaml)},
                                std::pair{kTokenizerFile, tokenizer}}) {
        if (file == kTokenizerFile && tokenizer.empty()) continue;
        OutputFile out(tmp / file);
        out.write(text.data(), text.size());
        out.commit();
        files[file] = {{"bytes", text.size()}, {"crc32", crc32(text.data(), text.size())}};
      }
      json manifest = {{"format", "trainer-checkpoint"},
                       {"version", kFormatVersion},
                       {"step", state.step},
                       {"layout_digest", fmt::format("{:016x}", model.layout().digest())},
                       {"retention", retention_json(options.policy)},
                       {"files", files}};
      if (sharded) {
        manifest["stage"] = dist::sharding_stage_name(dp.stage());
        manifest["shards"] = shards;
      }
      write_file_atomic(tmp / kManifestFile, manifest.dump(2) + "\n");
      fsync_path(tmp);

      litter->keep();
      commit_checkpoint(tmp, options.policy, options.prune_all);
    });
  agree(comm, error, options.timeout_s, "commit " + final_dir.string());
  return final_dir;
}

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
    for (const json& shard : m.at("shards")) {
      CHECK(shard.is_object() && shard.contains("file") && shard.at("file").is_string() &&
                files.contains(shard.at("file").get<std::string>()),
            "a shard names no file the manifest lists");
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
  if (c.files.contains(kTokenizerFile)) {
    c.tokenizer = dir / kTokenizerFile;
    CHECK(data::tokenizer_is(c.bytes(kTokenizerFile), c.state.tokenizer_hash),
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

struct CheckpointTensors::Source {
  std::shared_ptr<SafetensorsFile> file;
  int64_t begin, end;  // a global flat range
  const float* data;   // its element `begin`
};

namespace {

int64_t metadata_int(const SafetensorsFile& f, const char* key) {
  auto it = f.metadata().find(key);
  int64_t v = 0;
  bool ok = it != f.metadata().end();
  if (ok) {
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    ok = ec == std::errc() && end == text.data() + text.size();
  }
  CHECK(ok, "{}: missing or malformed metadata '{}'", f.path().string(), key);
  return v;
}

// An fp32 vector tensor of at least `need` elements.
const float* vector_of(const SafetensorsFile& f, const char* name, int64_t need) {
  const TensorEntry& t = f.get(name);
  CHECK(t.dtype == DType::f32 && t.shape.size() == 1 && t.shape[0] >= need,
        "{}: tensor '{}' is not an F32 vector of at least {} elements", f.path().string(), name,
        need);
  return static_cast<const float*>(t.data);
}

}  // namespace

namespace {

// A tensor file of `ckpt`, parsed from the bytes open_checkpoint mapped.
std::shared_ptr<SafetensorsFile> tensor_file(const Checkpoint& ckpt, const std::string& file) {
  const std::string_view b = ckpt.bytes(file);
  return std::make_shared<SafetensorsFile>(reinterpret_cast<const uint8_t*>(b.data()), b.size(),
                                           (ckpt.dir / file).string());
}

// Note [Self-describing files]: what the file's own header says against what the manifest and
// the trainer state say (version 2 on).
void check_header(const Checkpoint& ckpt, const SafetensorsFile& f, const char* key,
                  const std::string& expected) {
  if (json_integer_at<int>(ckpt.manifest, "version") < 2) return;
  auto it = f.metadata().find(key);
  CHECK(it != f.metadata().end() && it->second == expected,
        "{}: its header says {} {} but the checkpoint expects {} (a file of another checkpoint, "
        "or names swapped in the manifest)",
        f.path().string(), key, it == f.metadata().end() ? "nothing" : it->second, expected);
}

}  // namespace

CheckpointTensors::CheckpointTensors(const Checkpoint& ckpt, const nn::ParamLayout& layout)
    : mapped_(ckpt.files) {
  const int64_t total = layout.total();
  const std::string step = std::to_string(ckpt.state.step);
  if (!ckpt.manifest.contains("shards")) {
    auto model = tensor_file(ckpt, kModelFile);
    check_header(ckpt, *model, "step", step);
    for (const nn::ParamInfo& p : layout.params()) {
      CHECK(model->contains(p.name), "{}: no tensor '{}' (a checkpoint of another model?)",
            model->path().string(), p.name);
      const TensorEntry& t = model->get(p.name);
      CHECK(t.dtype == DType::f32 && t.shape == p.shape,
            "{}: tensor '{}' is {} [{}] but the model expects F32 [{}]", model->path().string(),
            p.name, dtype_name(t.dtype), fmt::join(t.shape, ", "), fmt::join(p.shape, ", "));
      params_.push_back({model, p.offset, p.offset + p.numel, static_cast<const float*>(t.data)});
    }
    auto opt = tensor_file(ckpt, kOptimizerFile);
    check_header(ckpt, *opt, "step", step);
    const int64_t b = metadata_int(*opt, "begin"), e = metadata_int(*opt, "end");
    CHECK(b == 0 && e == total, "{}: optimizer state covers [{}, {}), not the model's [0, {})",
          opt->path().string(), b, e, total);
    steps_ = metadata_int(*opt, "steps");
    m_.push_back({opt, 0, total, vector_of(*opt, "adamw.m", total)});
    v_.push_back({opt, 0, total, vector_of(*opt, "adamw.v", total)});
  } else {
    std::vector<std::pair<int64_t, int64_t>> all;
    const json& shards = ckpt.manifest.at("shards");
    for (size_t rank = 0; rank < shards.size(); ++rank) {
      const json& shard = shards[rank];
      auto f = tensor_file(ckpt, shard.at("file").get<std::string>());
      check_header(ckpt, *f, "step", step);
      check_header(ckpt, *f, "rank", std::to_string(rank));
      check_header(ckpt, *f, "world", std::to_string(shards.size()));
      if (ckpt.manifest.contains("stage"))
        check_header(ckpt, *f, "stage", ckpt.manifest.at("stage").get<std::string>());
      check_header(ckpt, *f, "ranges", shard.at("ranges").dump());
      const int64_t steps = metadata_int(*f, "steps");
      CHECK(rank == 0 || steps == steps_, "{}: {} optimizer steps, another shard says {}",
            f->path().string(), steps, steps_);
      steps_ = steps;
      for (const json& r : shard.at("ranges")) {
        const int64_t b = r[0].get<int64_t>(), e = r[1].get<int64_t>(), at = r[2].get<int64_t>();
        const float* p = vector_of(*f, "params", at + (e - b));
        params_.push_back({f, b, e, p + at});
        m_.push_back({f, b, e, vector_of(*f, "adamw.m", at + (e - b)) + at});
        v_.push_back({f, b, e, vector_of(*f, "adamw.v", at + (e - b)) + at});
        all.push_back({b, e});
      }
    }
    std::sort(all.begin(), all.end());
    int64_t next = 0;
    for (const auto& [b, e] : all) {
      CHECK(b == next,
            "{}: the shards do not tile the model's flat buffer (a gap or an overlap "
            "at element {})",
            ckpt.dir.string(), next);
      next = e;
    }
    CHECK(next == total,
          "{}: the shards hold {} elements but the model has {} (a checkpoint of "
          "another model?)",
          ckpt.dir.string(), next, total);
  }
  CHECK(0 <= steps_ && steps_ <= ckpt.state.step,
        "{}: {} optimizer steps recorded at training step {}", ckpt.dir.string(), steps_,
        ckpt.state.step);
}

CheckpointTensors::~CheckpointTensors() = default;

void CheckpointTensors::read(const std::vector<Source>& from, int64_t begin, int64_t end,
                             float* out, bool gaps_allowed) const {
  std::fill(out, out + (end - begin), 0.0f);
  int64_t covered = 0;
  for (const Source& s : from) {
    const int64_t b = std::max(begin, s.begin), e = std::min(end, s.end);
    if (b >= e) continue;
    std::memcpy(out + (b - begin), s.data + (b - s.begin), size_t(e - b) * sizeof(float));
    covered += e - b;
  }
  TRAINER_ASSERT(gaps_allowed || covered == end - begin, "checkpoint range [{}, {}) not covered",
                 begin, end);
}

void CheckpointTensors::read_params(int64_t begin, int64_t end, float* out) const {
  read(params_, begin, end, out, true);  // alignment gaps between tensors read as zero
}

void CheckpointTensors::read_moments(int64_t begin, int64_t end, float* m, float* v) const {
  read(m_, begin, end, m, false);
  read(v_, begin, end, v, false);
}

void load_training_state(const Checkpoint& ckpt, nn::Model& model, dist::DataParallel& dp) {
  const CheckpointTensors src(ckpt, model.layout());
  const Tensor masters = dp.masters();
  std::vector<float> p, m, v;
  for (const nn::FlatSlice& sl : dp.slices())
    for_each_piece(sl.size(), [&](int64_t pb, int64_t pe) {
      const int64_t b = sl.begin + pb, e = sl.begin + pe, n = e - b;
      p.resize(size_t(n)), m.resize(size_t(n)), v.resize(size_t(n));
      src.read_params(b, e, p.data());
      copy(model.context(), masters.flat(sl.local + pb, n), make_tensor(p.data(), DType::f32, {n}));
      src.read_moments(b, e, m.data(), v.data());
      dp.optimizer().import_moments(b, e, m.data(), v.data());
    });
  dp.optimizer().set_steps(src.optimizer_steps());
  dp.masters_changed();
}

void load_weights(const Checkpoint& ckpt, nn::Model& model) {
  const CheckpointTensors src(ckpt, model.layout());
  const Tensor params = model.params();
  std::vector<float> p;
  for_each_piece(model.layout().total(), [&](int64_t b, int64_t e) {
    p.resize(size_t(e - b));
    src.read_params(b, e, p.data());  // alignment gaps read as zero
    copy(model.context(), params.flat(b, e - b), make_tensor(p.data(), DType::f32, {e - b}));
  });
  model.sync_working_params();
}

}  // namespace trainer::app
