#include "app/checkpoint.h"
#include "app/checkpoint_files.h"

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
#include "dist/grid_shape.h"
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
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kConfigFile = "config.yaml";
constexpr const char* kManifestFile = kCheckpointManifest;
constexpr const char* kTokenizerFiles[] = {"tokenizer.model", "tokenizer.json"};

json state_to_json(const TrainerState& s) {
  json j = {{"step", s.step},
            {"tokens_seen", s.tokens_seen},
            {"world_size", s.world_size},
            {"tensor_parallel", s.tensor_parallel},
            {"pipeline_parallel", s.pipeline_parallel},
            {"tokenizer_hash", fmt::format("{:016x}", s.tokenizer_hash)},
            {"data_hash", fmt::format("{:016x}", s.data_hash)},
            {"loader", s.loader},
            {"threads", s.threads},
            {"hosts", s.hosts}};
  if (!s.spike_guard.is_null()) j["spike_guard"] = s.spike_guard;
  return j;
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
  } catch (const dist::CommError& e) {
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
SafetensorsWriter::Fill moments_fill(dist::DataParallel& dp, const nn::Model& model, bool second) {
  return [&dp, &model, second](int64_t begin, int64_t end, void* out) {
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
        dp.optimizer().export_moments(model.context(), g, g + (e - b), other.data(), mine);
      else
        dp.optimizer().export_moments(model.context(), g, g + (e - b), mine, other.data());
    }
  };
}

// Who writes what (Note [Sharded checkpoints]): in a sharded, tensor- or pipeline-parallel
// run, each rank holding a part no other rank holds writes a shard (every rank of a sharding
// stage; the first data replica's ranks without sharding); otherwise rank 0 writes the whole
// state.
struct Writers {
  dist::GridShape grid;  // the run's (Note [Parallel grid])
  bool sharded = false;  // a sharding stage over the data group
  bool shards() const { return sharded || grid.tensor > 1 || grid.pipeline > 1; }
  bool writes(int rank) const { return sharded || grid.place(rank).data_rank == 0; }
};

// The flat ranges this rank writes of the whole model's buffer at its tensor-parallel degree
// (a pipeline stage's units mapped there: Note [Pipeline stages]), as [begin, end, offset in
// the shard's tensors]: each slice of its data-parallel shard, or all it holds in as few
// ranges as its units allow; a last stage's copy of a tied embedding is the first stage's to
// write.
json shard_ranges(const nn::ParamLayout& layout, dist::DataParallel& dp) {
  const int64_t skip_end =
      layout.holds_tied_copy() ? layout.units()[size_t(layout.embedding_unit())].end : 0;
  const bool whole = dp.sharding() == dist::ShardingStage::none;
  json ranges = json::array();
  for (const nn::FlatSlice& sl : dp.slices())
    layout.for_each_whole_range(
        std::max(sl.begin, skip_end), sl.end, [&](int64_t b, int64_t e, int64_t at) {
          const int64_t local = sl.local + (b - sl.begin);
          json& last = ranges.empty() ? ranges : ranges.back();
          if (whole && !ranges.empty() && last[1].get<int64_t>() == at &&
              last[2].get<int64_t>() + (at - last[0].get<int64_t>()) == local)
            last[1] = at + (e - b);  // the next unit, contiguous in both buffers
          else if (b < e)
            ranges.push_back({at, at + (e - b), local});
        });
  return ranges;
}

// Every writer's ranges (as shard_ranges gives them), gathered from the ranks.
std::vector<json> gather_ranges(dist::Communicator& comm, const json& mine) {
  std::vector<int64_t> flat;
  for (const json& r : mine)
    for (int i = 0; i < 3; ++i) flat.push_back(r[size_t(i)].get<int64_t>());
  const std::vector<int64_t> sizes = comm.all_gather(std::vector<int64_t>{int64_t(flat.size())});
  const int64_t most = *std::max_element(sizes.begin(), sizes.end());
  flat.resize(size_t(most), 0);
  const std::vector<int64_t> all = comm.all_gather(flat);
  std::vector<json> out(size_t(comm.size()), json::array());
  for (int r = 0; r < comm.size(); ++r)
    for (int64_t i = 0; i < sizes[size_t(r)]; i += 3) {
      const int64_t* x = all.data() + r * most + i;
      out[size_t(r)].push_back({x[0], x[1], x[2]});
    }
  return out;
}

// Note [Sharded checkpoints]
// A sharded run's rank r writes shard-r-of-N.safetensors: its local masters ("params") and
// moments ("adamw.m", "adamw.v"), padding included, as held in memory; the manifest lists
// each shard's flat ranges [begin, end) and where each starts in the file's tensors. Under
// tensor parallelism (Note [Parallel grid]) the ranges are of the writer's slice of the model
// (its "tensor_rank" of the manifest's "tensor_parallel"), and without a sharding stage only
// the first data replica's ranks write. Reading (checkpoint_tensors.cpp) takes any range of
// any layout, whole or a slice at any degree, from whichever files hold its elements, so a
// checkpoint loads at any world size, tensor-parallel degree and stage, and into a whole model
// for eval and export, one piece at a time.
//
// Note [Self-describing files]
// Each tensor file also says what it is in its own header: the training step, and a shard its
// rank, the world size, the sharding stage and its ranges. Loading checks them against the
// manifest and the trainer state, so a shard copied from another step or checkpoint, or two
// shard names swapped in the manifest, are refused by name instead of loading other or
// permuted weights (the CRC-32s cannot tell: they describe whatever files are there).
uint32_t write_shard(const fs::path& path, dist::DataParallel& dp, const nn::Model& model,
                     const TrainerState& state, const Writers& writers, const json& ranges,
                     int rank, int world) {
  const Tensor masters = dp.masters();
  const int64_t n = masters.numel();
  SafetensorsWriter w;
  add_f32(w, "params", {n}, model.context(), masters, 0);
  w.add_generated("adamw.m", DType::f32, {n}, moments_fill(dp, model, false));
  w.add_generated("adamw.v", DType::f32, {n}, moments_fill(dp, model, true));
  w.set_metadata("steps", std::to_string(dp.optimizer().steps()));
  w.set_metadata("step", std::to_string(state.step));
  w.set_metadata("rank", std::to_string(rank));
  w.set_metadata("world", std::to_string(world));
  w.set_metadata("stage", dist::kShardingStageNames.name(dp.sharding()));
  w.set_metadata("ranges", ranges.dump());
  if (writers.grid.tensor > 1)
    w.set_metadata("tensor_rank", std::to_string(writers.grid.place(rank).tensor_rank));
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
  w.add_generated("adamw.m", DType::f32, {n}, moments_fill(dp, model, false));
  w.add_generated("adamw.v", DType::f32, {n}, moments_fill(dp, model, true));
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
  const bool leader = comm.rank() == 0;
  const int replica = state.tensor_parallel * state.pipeline_parallel;
  const Writers writers{{state.tensor_parallel, state.pipeline_parallel, comm.size() / replica},
                        dp.sharding() != dist::ShardingStage::none};
  const bool sharded = writers.shards();
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
  const json ranges = sharded ? shard_ranges(model.layout(), dp) : json::array();
  attempt([&] {
    if (sharded && writers.writes(comm.rank())) {
      const fs::path path = tmp / shard_file(comm.rank(), comm.size());
      shard_info = {
          int64_t(write_shard(path, dp, model, state, writers, ranges, comm.rank(), comm.size())),
          int64_t(fs::file_size(path))};
    } else if (!sharded && leader) {
      write_whole(tmp, model, dp, state, files);
    }
  });
  agree(comm, error, options.timeout_s, "write its part of " + tmp.string());
  const std::vector<int64_t> all_info =
      sharded ? comm.all_gather(shard_info) : std::vector<int64_t>{};
  const std::vector<json> all_ranges = sharded ? gather_ranges(comm, ranges) : std::vector<json>{};

  if (leader)
    attempt([&] {
      json shards = json::array();
      if (sharded)
        for (int r = 0; r < comm.size(); ++r) {
          if (!writers.writes(r)) continue;
          const std::string file = shard_file(r, comm.size());
          files[file] = {{"bytes", all_info[size_t(2 * r + 1)]},
                         {"crc32", all_info[size_t(2 * r)]}};
          json shard = {{"file", file}, {"rank", r}, {"ranges", all_ranges[size_t(r)]}};
          if (writers.grid.tensor > 1) shard["tensor_rank"] = writers.grid.place(r).tensor_rank;
          shards.push_back(shard);
        }
      const std::string state_text = state_to_json(state).dump(2) + "\n";
      const char* tokenizer_file = data::tokenizer_file_name(tokenizer);
      for (auto [file, text] : {std::pair{kStateFile, std::string_view(state_text)},
                                std::pair{kConfigFile, std::string_view(config_yaml)},
                                std::pair{tokenizer_file, tokenizer}}) {
        if (file == tokenizer_file && tokenizer.empty()) continue;
        OutputFile out(tmp / file);
        out.write(text.data(), text.size());
        out.commit();
        files[file] = {{"bytes", text.size()}, {"crc32", crc32(text.data(), text.size())}};
      }
      json manifest = {{"format", "trainer-checkpoint"},
                       {"version", kFormatVersion},
                       {"step", state.step},
                       {"layout_digest", fmt::format("{:016x}", model.layout().model_digest())},
                       {"retention", retention_json(options.policy)},
                       {"files", files}};
      if (sharded) {
        manifest["stage"] = dist::kShardingStageNames.name(dp.sharding());
        manifest["shards"] = shards;
      }
      if (writers.grid.tensor > 1) manifest["tensor_parallel"] = writers.grid.tensor;
      if (writers.grid.pipeline > 1) manifest["pipeline_parallel"] = writers.grid.pipeline;
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
