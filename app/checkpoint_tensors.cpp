// Reading a checkpoint's tensors by flat range of any layout: the whole model or a slice of it at
// any tensor-parallel degree, from a checkpoint written whole, sharded or by tensor-parallel
// ranks (Note [Sharded checkpoints] in checkpoint_save.cpp), and loading them into a run.
#include <algorithm>
#include <charconv>
#include <cstring>

#include <fmt/ranges.h>

#include "app/checkpoint.h"
#include "app/checkpoint_files.h"
#include "runtime/error.h"
#include "runtime/json_number.h"
#include "runtime/memory.h"
#include "runtime/safetensors.h"

namespace trainer::app {

using nlohmann::json;

struct CheckpointTensors::Source {
  std::shared_ptr<SafetensorsFile> file;
  int64_t begin, end;  // a range of the flat buffer of the checkpoint's slice (or whole model)
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
    : mapped_(ckpt.files), target_(layout) {
  degree_ = ckpt.manifest.contains("tensor_parallel")
                ? json_integer_at<int>(ckpt.manifest, "tensor_parallel")
                : 1;
  map_layouts(ckpt);
  params_.resize(size_t(degree_));
  m_.resize(size_t(degree_));
  v_.resize(size_t(degree_));
  if (!ckpt.manifest.contains("shards"))
    add_whole_files(ckpt);
  else
    add_shards(ckpt);
  for (Sources* s : {&params_, &m_, &v_})
    for (std::vector<Source>& rank : *s)
      std::sort(rank.begin(), rank.end(),
                [](const Source& a, const Source& b) { return a.begin < b.begin; });
  CHECK(0 <= steps_ && steps_ <= ckpt.state.step,
        "{}: {} optimizer steps recorded at training step {}", ckpt.dir.string(), steps_,
        ckpt.state.step);
}

CheckpointTensors::~CheckpointTensors() = default;

// The layout of the checkpoint's slices (the target's model, every layer, cut for the
// checkpoint's degree: shards are written in those coordinates at any pipeline layout) and,
// for each of the target's parameters, the same parameter there.
void CheckpointTensors::map_layouts(const Checkpoint& ckpt) {
  nn::ModelConfig source = target_.config();
  source.tensor = {degree_, 0};
  source.pipeline = {};
  try {
    source_ = std::make_unique<nn::ParamLayout>(source);
  } catch (const UsageError& e) {
    THROW_ERROR(
        "{}: written by {} tensor-parallel ranks, whose cuts do not fit this model (a "
        "checkpoint of another model?): {}",
        ckpt.dir.string(), degree_, e.what());
  }
  for (const nn::ParamInfo& p : target_.params()) {
    const nn::ParamInfo* q = source_->find(p.name);
    TRAINER_ASSERT(q && q->full_shape == p.full_shape, "{} differs between slices", p.name);
    source_of_.push_back(int(q - source_->params().data()));
  }
}

// A replicated run's files: model.safetensors by name (checked against the model's shapes)
// and optimizer.safetensors over the whole flat buffer.
void CheckpointTensors::add_whole_files(const Checkpoint& ckpt) {
  CHECK(degree_ == 1, "{}: whole tensor files from {} tensor-parallel ranks", ckpt.dir.string(),
        degree_);
  const std::string step = std::to_string(ckpt.state.step);
  const int64_t total = source_->total();
  auto model = tensor_file(ckpt, kModelFile);
  check_header(ckpt, *model, "step", step);
  for (const nn::ParamInfo& p : source_->params()) {
    CHECK(model->contains(p.name), "{}: no tensor '{}' (a checkpoint of another model?)",
          model->path().string(), p.name);
    const TensorEntry& t = model->get(p.name);
    CHECK(t.dtype == DType::f32 && t.shape == p.shape,
          "{}: tensor '{}' is {} [{}] but the model expects F32 [{}]", model->path().string(),
          p.name, dtype_name(t.dtype), fmt::join(t.shape, ", "), fmt::join(p.shape, ", "));
    params_[0].push_back({model, p.offset, p.offset + p.numel, static_cast<const float*>(t.data)});
  }
  auto opt = tensor_file(ckpt, kOptimizerFile);
  check_header(ckpt, *opt, "step", step);
  const int64_t b = metadata_int(*opt, "begin"), e = metadata_int(*opt, "end");
  CHECK(b == 0 && e == total, "{}: optimizer state covers [{}, {}), not the model's [0, {})",
        opt->path().string(), b, e, total);
  steps_ = metadata_int(*opt, "steps");
  m_[0].push_back({opt, 0, total, vector_of(*opt, "adamw.m", total)});
  v_[0].push_back({opt, 0, total, vector_of(*opt, "adamw.v", total)});
}

// A sharded or tensor-parallel run's shards (Note [Sharded checkpoints]): each file's header
// checked against the manifest, and each slice's ranges tiling its flat buffer.
void CheckpointTensors::add_shards(const Checkpoint& ckpt) {
  const std::string step = std::to_string(ckpt.state.step);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> all(static_cast<size_t>(degree_));
  const json& shards = ckpt.manifest.at("shards");
  for (size_t i = 0; i < shards.size(); ++i) {
    const json& shard = shards[i];
    const int rank = shard.contains("rank") ? shard.at("rank").get<int>() : int(i);
    const int tensor_rank = shard.contains("tensor_rank") ? shard.at("tensor_rank").get<int>() : 0;
    auto f = tensor_file(ckpt, shard.at("file").get<std::string>());
    check_header(ckpt, *f, "step", step);
    check_header(ckpt, *f, "rank", std::to_string(rank));
    check_header(ckpt, *f, "world", std::to_string(ckpt.state.world_size));
    if (ckpt.manifest.contains("stage"))
      check_header(ckpt, *f, "stage", ckpt.manifest.at("stage").get<std::string>());
    check_header(ckpt, *f, "ranges", shard.at("ranges").dump());
    if (degree_ > 1) check_header(ckpt, *f, "tensor_rank", std::to_string(tensor_rank));
    const int64_t steps = metadata_int(*f, "steps");
    CHECK(i == 0 || steps == steps_, "{}: {} optimizer steps, another shard says {}",
          f->path().string(), steps, steps_);
    steps_ = steps;
    const size_t t = size_t(tensor_rank);
    for (const json& r : shard.at("ranges")) {
      const int64_t b = r[0].get<int64_t>(), e = r[1].get<int64_t>(), at = r[2].get<int64_t>();
      const float* p = vector_of(*f, "params", at + (e - b));
      params_[t].push_back({f, b, e, p + at});
      m_[t].push_back({f, b, e, vector_of(*f, "adamw.m", at + (e - b)) + at});
      v_[t].push_back({f, b, e, vector_of(*f, "adamw.v", at + (e - b)) + at});
      all[t].push_back({b, e});
    }
  }
  for (int t = 0; t < degree_; ++t) {
    std::sort(all[size_t(t)].begin(), all[size_t(t)].end());
    int64_t next = 0;
    for (const auto& [b, e] : all[size_t(t)]) {
      CHECK(b == next,
            "{}: the shards{} do not tile the model's flat buffer (a gap or an overlap at "
            "element {})",
            ckpt.dir.string(), degree_ > 1 ? fmt::format(" of tensor rank {}", t) : "", next);
      next = e;
    }
    CHECK(next == source_->total(),
          "{}: the shards{} hold {} elements but the model has {} (a checkpoint of another "
          "model?)",
          ckpt.dir.string(), degree_ > 1 ? fmt::format(" of tensor rank {}", t) : "", next,
          source_->total());
  }
}

// Copies [at, at + n) of a slice's flat buffer from the sources holding it; returns the
// elements found.
int64_t CheckpointTensors::copy_from(const std::vector<Source>& from, int64_t at, int64_t n,
                                     float* out) {
  int64_t found = 0;
  auto it = std::upper_bound(from.begin(), from.end(), at,
                             [](int64_t x, const Source& s) { return x < s.begin; });
  if (it != from.begin()) --it;
  for (; it != from.end() && it->begin < at + n; ++it) {
    const int64_t b = std::max(at, it->begin), e = std::min(at + n, it->end);
    if (b >= e) continue;
    std::memcpy(out + (b - at), it->data + (b - it->begin), size_t(e - b) * sizeof(float));
    found += e - b;
  }
  return found;
}

// Each of the target's parameters in [begin, end), element by element the whole tensor's, and
// each run of those from the checkpoint's slice that holds it (Note [Tensor-parallel splits]).
void CheckpointTensors::read(const Sources& from, int64_t begin, int64_t end, float* out) const {
  std::fill(out, out + (end - begin), 0.0f);  // alignment gaps between tensors read as zero
  int64_t wanted = 0, found = 0;
  for (size_t i = 0; i < target_.params().size(); ++i) {
    const nn::ParamInfo& p = target_.params()[i];
    const int64_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (b >= e) continue;
    wanted += e - b;
    const nn::ParamInfo& q = source_->params()[size_t(source_of_[i])];
    nn::for_each_whole_run(
        p, b - p.offset, e - p.offset, [&](int64_t local, int64_t whole, int64_t count) {
          nn::for_each_slice_run(q, degree_, whole, whole + count,
                                 [&](int rank, int64_t at, int64_t w, int64_t n) {
                                   float* dst = out + (p.offset + local + (w - whole) - begin);
                                   found += copy_from(from[size_t(rank)], q.offset + at, n, dst);
                                 });
        });
  }
  TRAINER_ASSERT(found == wanted, "checkpoint range [{}, {}) not covered", begin, end);
}

void CheckpointTensors::read_params(int64_t begin, int64_t end, float* out) const {
  read(params_, begin, end, out);
}

void CheckpointTensors::read_moments(int64_t begin, int64_t end, float* m, float* v) const {
  read(m_, begin, end, m);
  read(v_, begin, end, v);
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
      dp.optimizer().import_moments(model.context(), b, e, m.data(), v.data());
    });
  dp.optimizer().set_steps(src.optimizer_steps());
  dp.masters_changed();
}

}  // namespace trainer::app
