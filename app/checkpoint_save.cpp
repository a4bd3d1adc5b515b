#include "app/checkpoint_save.h"
#include "app/checkpoint_files.h"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "app/stop_signals.h"
#include "data/tokenizer.h"
#include "dist/sharding.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/trace.h"

namespace trainer::app {

namespace fs = std::filesystem;

using nlohmann::json;

namespace {

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

// Runs fn, keeping the message of what it throws in `error` (the ranks agree on errors
// before any throws).
template <class Fn>
void attempt(std::string& error, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    error = e.what();
  }
}

// Puts the calling thread in SCHED_IDLE, so that it runs only on cores the training leaves
// idle (Note [Asynchronous checkpoints]). Measured at the 124M shape on 2 cores: the steps
// beside a write at normal priority took 2.0x their time, at idle priority 0.97x, and the
// write 8.7 s instead of 5.5 s. Its disk I/O stays best-effort (the kernel would otherwise
// give an idle thread idle I/O, behind the loader's reads). Where the policy cannot be set the
// write runs as before.
void run_when_idle() {
  sched_param none{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
  constexpr int kWhoThread = 1, kBestEffort = 2, kClassShift = 13, kLevel = 4;  // ioprio.h
  syscall(SYS_ioprio_set, kWhoThread, 0, (kBestEffort << kClassShift) | kLevel);
}

// Back to the normal policy: the training now waits for the write (joining it).
void hurry(std::thread& t) {
  sched_param none{};
  pthread_setschedparam(t.native_handle(), SCHED_OTHER, &none);
}

// Exports AdamW's moments of this rank's local flat buffer [begin, end) into m and v (its
// slices at their local offsets, zero elsewhere).
void export_local_moments(dist::DataParallel& dp, const nn::Model& model, int64_t begin,
                          int64_t end, float* m, float* v) {
  std::fill(m, m + (end - begin), 0.0f);
  std::fill(v, v + (end - begin), 0.0f);
  for (const nn::FlatSlice& sl : dp.slices()) {
    const int64_t b = std::max(begin, sl.local), e = std::min(end, sl.local + sl.size());
    if (b >= e) continue;
    const int64_t g = sl.begin + (b - sl.local);
    dp.optimizer().export_moments(model.context(), g, g + (e - b), m + (b - begin),
                                  v + (b - begin));
  }
}

// The live state of `dp`, read a piece at a time as the files are written (a whole host copy
// would add 12 bytes per parameter to every synchronous save): the masters in place when
// they are in host memory.
LocalState live_state(dist::DataParallel& dp, const nn::Model& model) {
  const Tensor masters = dp.masters();
  LocalState s;
  s.elements = masters.numel();
  s.optimizer_steps = dp.optimizer().steps();
  if (masters.device == Device::cpu)
    s.masters.host = masters.as<float>();
  else
    s.masters.fill = [&model, masters](int64_t b, int64_t e, void* out) {
      copy(model.context(), make_tensor(static_cast<float*>(out), DType::f32, {e - b}),
           masters.flat(b, e - b));
    };
  auto moment = [&dp, &model](bool second) {
    return [&dp, &model, second](int64_t b, int64_t e, void* out) {
      std::vector<float> other(size_t(e - b));
      float* mine = static_cast<float*>(out);
      export_local_moments(dp, model, b, e, second ? other.data() : mine,
                           second ? mine : other.data());
    };
  };
  s.m.fill = moment(false);
  s.v.fill = moment(true);
  return s;
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

Writers writers_of(int world, const dist::DataParallel& dp, const TrainerState& state) {
  const int replica = state.tensor_parallel * state.pipeline_parallel;
  return {{state.tensor_parallel, state.pipeline_parallel, world / replica},
          dp.sharding() != dist::ShardingStage::none};
}

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

uint32_t write_shard(const fs::path& path, const LocalState& local, const TrainerState& state,
                     const Writers& writers, const std::string& stage, const json& ranges, int rank,
                     int world) {
  const int64_t n = local.elements;
  SafetensorsWriter w;
  local.masters.add(w, "params", {n}, 0);
  local.m.add(w, "adamw.m", {n}, 0);
  local.v.add(w, "adamw.v", {n}, 0);
  w.set_metadata("steps", std::to_string(local.optimizer_steps));
  w.set_metadata("step", std::to_string(state.step));
  w.set_metadata("rank", std::to_string(rank));
  w.set_metadata("world", std::to_string(world));
  w.set_metadata("stage", stage);
  w.set_metadata("ranges", ranges.dump());
  if (writers.grid.tensor > 1)
    w.set_metadata("tensor_rank", std::to_string(writers.grid.place(rank).tensor_rank));
  return w.write(path);
}

}  // namespace

void LocalState::Flat::add(SafetensorsWriter& w, std::string name, std::vector<int64_t> shape,
                           int64_t offset) const {
  if (host) {
    w.add(std::move(name), DType::f32, std::move(shape), host + offset);
    return;
  }
  w.add_generated(std::move(name), DType::f32, std::move(shape),
                  [fill = fill, offset](int64_t b, int64_t e, void* out) {
                    fill(offset + b, offset + e, out);
                  });
}

SaveSnapshot::SaveSnapshot(int64_t elements)
    : elements_(elements),
      buffer_(size_t(bytes_for(elements)), Device::cpu, MemoryUse::checkpoint) {
  // Its pages are mapped on first write (Note [Host memory on demand]): written now, at
  // start-up, the first save's copy does not pay their faults inside a step (measured at the
  // 124M shape: a 3.4 s first stall against 0.18 s for the next).
  buffer_.zero();
}

LocalState SaveSnapshot::take(dist::DataParallel& dp, const nn::Model& model) {
  const Tensor masters = dp.masters();
  TRAINER_ASSERT(masters.numel() == elements_, "a snapshot of {} elements for {}", elements_,
                 masters.numel());
  float* at = buffer_.as<float>();
  LocalState s;
  s.elements = elements_;
  s.optimizer_steps = dp.optimizer().steps();
  s.masters.host = at;
  s.m.host = at + elements_;
  s.v.host = at + 2 * elements_;
  copy(model.context(), make_tensor(at, DType::f32, {elements_}), masters);
  export_local_moments(dp, model, 0, elements_, at + elements_, at + 2 * elements_);
  return s;
}

bool writes_checkpoint_tensors(int rank, const dist::GridShape& grid,
                               dist::ShardingStage sharding) {
  const Writers w{grid, sharding != dist::ShardingStage::none};
  return w.shards() ? w.writes(rank) : rank == 0;
}

CheckpointSave::CheckpointSave(dist::Communicator& comm, const fs::path& run_dir,
                               const nn::Model& model, dist::DataParallel& dp,
                               const TrainerState& state, std::string config_yaml,
                               std::string_view tokenizer, const SaveOptions& options,
                               SaveSnapshot* snapshot, bool in_background)
    : comm_(comm),
      layout_(model.layout()),
      state_(state),
      config_yaml_(std::move(config_yaml)),
      tokenizer_(tokenizer),
      options_(options) {
  const trace::Span span("checkpoint begin", "checkpoint", "step", state.step);
  Timer timer;
  const fs::path root = run_dir / "checkpoints";
  const std::string name = fmt::format("step-{}", state.step);
  tmp_ = root / (name + ".tmp");
  final_dir_ = root / name;
  const Writers writers = writers_of(comm.size(), dp, state);
  grid_ = writers.grid;
  sharded_ = writers.sharded;
  stage_ = dist::kShardingStageNames.name(dp.sharding());
  writes_ = writes_checkpoint_tensors(comm.rank(), grid_, dp.sharding());
  if (comm.rank() == 0)
    attempt(error_, [&] {
      fs::create_directories(root);
      fs::remove_all(tmp_);
      fs::create_directories(tmp_);
      litter_.emplace(tmp_);
    });
  agree(comm, error_, options.timeout_s, "create " + tmp_.string());
  if (writers.shards()) ranges_ = shard_ranges(layout_, dp);
  if (writes_ && !in_background) {
    local_ = live_state(dp, model);
    write();
  } else if (writes_) {
    TRAINER_ASSERT(snapshot, "rank {} writes step-{} in the background without a snapshot",
                   comm.rank(), state.step);
    local_ = snapshot->take(dp, model);
    writing_.store(true, std::memory_order_release);
    thread_ = std::thread([this] {
      block_stop_signals();  // the training thread alone takes them (Note [Stop signals])
      trace::name_thread("checkpoint writer");
      run_when_idle();
      write();
      writing_.store(false, std::memory_order_release);
    });
  }
  begin_s_ = timer.seconds();
}

CheckpointSave::~CheckpointSave() {
  if (!thread_.joinable()) return;
  hurry(thread_);
  thread_.join();
}

// This rank's tensor files into the temporary (on the save's thread under checkpoint.async):
// its shard, or all of a replicated run's state from rank 0. Touches only local_ and what the
// save copied, never the communicator.
void CheckpointSave::write() {
  const trace::Span span("checkpoint write", "checkpoint", "step", state_.step);
  Timer timer;
  test_save_delay(comm_.rank());
  const Writers writers{grid_, sharded_};
  attempt(error_, [&] {
    if (writers.shards()) {
      const fs::path path = tmp_ / shard_file(comm_.rank(), comm_.size());
      shard_info_ = {int64_t(write_shard(path, local_, state_, writers, stage_, ranges_,
                                         comm_.rank(), comm_.size())),
                     int64_t(fs::file_size(path))};
    } else {
      write_whole(files_);
    }
  });
  write_s_ = timer.seconds();
}

// The whole state, as a replicated run's rank 0 holds it.
void CheckpointSave::write_whole(json& files) {
  auto record = [&](const char* file, uint32_t crc) {
    files[file] = {{"bytes", fs::file_size(tmp_ / file)}, {"crc32", crc}};
  };
  {
    SafetensorsWriter w;  // Hugging Face names (rows in the trainer's order; export reorders)
    for (const nn::ParamInfo& p : layout_.params())
      local_.masters.add(w, p.name, p.shape, p.offset);
    w.set_metadata("format", "pt");
    w.set_metadata("step", std::to_string(state_.step));
    record(kModelFile, w.write(tmp_ / kModelFile));
  }
  const int64_t n = layout_.total();
  SafetensorsWriter w;
  local_.m.add(w, "adamw.m", {n}, 0);
  local_.v.add(w, "adamw.v", {n}, 0);
  w.set_metadata("begin", "0");
  w.set_metadata("end", std::to_string(n));
  w.set_metadata("steps", std::to_string(local_.optimizer_steps));
  w.set_metadata("step", std::to_string(state_.step));
  record(kOptimizerFile, w.write(tmp_ / kOptimizerFile));
}

fs::path CheckpointSave::commit() {
  const trace::Span span("checkpoint commit", "checkpoint", "step", state_.step);
  if (thread_.joinable()) {
    hurry(thread_);
    thread_.join();
  }
  const Writers writers{grid_, sharded_};
  const bool shards = writers.shards();
  agree(comm_, error_, options_.timeout_s, "write its part of " + tmp_.string());
  const std::vector<int64_t> all_info =
      shards ? comm_.all_gather(shard_info_) : std::vector<int64_t>{};
  const std::vector<json> all_ranges = shards ? gather_ranges(comm_, ranges_) : std::vector<json>{};
  std::string error;
  if (comm_.rank() == 0)
    attempt(error, [&] {
      json files = files_;
      json shard_list = json::array();
      if (shards)
        for (int r = 0; r < comm_.size(); ++r) {
          if (!writers.writes(r)) continue;
          const std::string file = shard_file(r, comm_.size());
          files[file] = {{"bytes", all_info[size_t(2 * r + 1)]},
                         {"crc32", all_info[size_t(2 * r)]}};
          json shard = {{"file", file}, {"rank", r}, {"ranges", all_ranges[size_t(r)]}};
          if (grid_.tensor > 1) shard["tensor_rank"] = grid_.place(r).tensor_rank;
          shard_list.push_back(shard);
        }
      const std::string state_text = state_to_json(state_).dump(2) + "\n";
      const char* tokenizer_file = data::tokenizer_file_name(tokenizer_);
      for (auto [file, text] : {std::pair{kStateFile, std::string_view(state_text)},
                                std::pair{kConfigFile, std::string_view(config_yaml_)},
                                std::pair{tokenizer_file, std::string_view(tokenizer_)}}) {
        if (file == tokenizer_file && tokenizer_.empty()) continue;
        OutputFile out(tmp_ / file);
        out.write(text.data(), text.size());
        out.commit();
        files[file] = {{"bytes", text.size()}, {"crc32", crc32(text.data(), text.size())}};
      }
      json manifest = {{"format", "trainer-checkpoint"},
                       {"version", kFormatVersion},
                       {"step", state_.step},
                       {"layout_digest", fmt::format("{:016x}", layout_.model_digest())},
                       {"retention", retention_json(options_.policy)},
                       {"files", files}};
      if (shards) {
        manifest["stage"] = stage_;
        manifest["shards"] = shard_list;
      }
      if (grid_.tensor > 1) manifest["tensor_parallel"] = grid_.tensor;
      if (grid_.pipeline > 1) manifest["pipeline_parallel"] = grid_.pipeline;
      write_file_atomic(tmp_ / kManifestFile, manifest.dump(2) + "\n");
      fsync_path(tmp_);

      litter_->keep();
      commit_checkpoint(tmp_, options_.policy, options_.prune_all);
    });
  agree(comm_, error, options_.timeout_s, "commit " + final_dir_.string());
  return final_dir_;
}

fs::path save_checkpoint(dist::Communicator& comm, const fs::path& run_dir, nn::Model& model,
                         dist::DataParallel& dp, const TrainerState& state,
                         const std::string& config_yaml, std::string_view tokenizer,
                         const SaveOptions& options) {
  CheckpointSave save(comm, run_dir, model, dp, state, config_yaml, tokenizer, options, nullptr,
                      false);
  return save.commit();
}

}  // namespace trainer::app
