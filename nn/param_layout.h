// Named layout of every parameter inside one flat buffer, built from the architecture's
// specification. Parameters, gradients and optimizer state use the same offsets, so DDP
// buckets, shards and checkpoints address any tensor as an (offset, numel) range. The buffer
// is cut into units (the embedding, each block, the final unit) that are contiguous ranges.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/arch.h"
#include "nn/model_config.h"

namespace trainer::nn {

enum class UnitKind : uint8_t { embedding, block, final };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in elements, 16-element (64-byte fp32) aligned
  int64_t numel = 0;
  bool decay = false;
  Init init = Init::zeros;
  float init_std = 0;  // the normal rules' standard deviation (residual outputs' scaled down)
  Role role = Role::kCount;
  int unit = 0;
  std::array<int64_t, 2> hf_rows{0, 0};  // ParamSpec::hf_rows
  // Under tensor parallelism (Note [Tensor-parallel splits]): how the parameter is cut, the
  // whole tensor's shape, and the slice held here. `shape` and `numel` are the slice's.
  Split split;
  std::vector<int64_t> full_shape;
  TensorSlice tensor;
  int64_t full_numel() const;
};

struct Unit {
  UnitKind kind;
  int64_t begin, end;  // the unit's range of the flat buffer
  // Where the unit starts in the flat buffer of the whole model at this tensor-parallel degree
  // (a pipeline stage holds some units: Note [Pipeline stages]); begin for a whole model.
  int64_t whole_begin = 0;
  int layer = -1;                               // a block's layer in the model
  std::array<int, size_t(Role::kCount)> param;  // index into params() by role, -1 if absent
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  // The model (and slice) it lays out.
  const ModelConfig& config() const { return config_; }

  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  // The parameter called `name`, or nullptr.
  const ParamInfo* find(const std::string& name) const;

  // Units in buffer order: the embedding, blocks 0..L-1, the final unit; a pipeline stage's
  // are those it holds, in the same order (config().pipeline).
  const std::vector<Unit>& units() const { return units_; }
  // The embedding unit (0), block `layer`'s and the final unit, or -1 where not held.
  int embedding_unit() const { return has_embedding_ ? 0 : -1; }
  int block_unit(int layer) const { return block_unit_[size_t(layer)]; }
  int final_unit() const { return has_final_ ? int(units_.size()) - 1 : -1; }
  // Whether the embedding unit here is the last pipeline stage's copy of a tied embedding (the
  // first stage's is the one checkpoints and the gradient norm count).
  bool holds_tied_copy() const { return has_embedding_ && !config_.pipeline.first; }
  // The flat buffer's elements in the whole model's buffer (at this tensor-parallel degree):
  // calls fn(begin, end, whole_begin) for each unit's part of [begin, end), in order.
  void for_each_whole_range(int64_t begin, int64_t end,
                            const std::function<void(int64_t, int64_t, int64_t)>& fn) const;
  // The parameter with `role` in unit `u`; an internal error when the unit has none.
  const ParamInfo& get(int u, Role role) const;
  bool has(int u, Role role) const { return units_[size_t(u)].param[size_t(role)] >= 0; }
  // A digest of names, shapes and offsets: equal layouts have equal digests.
  uint64_t digest() const;
  // The layout of every layer at this tensor-parallel degree: the whole model as each
  // pipeline stage of it sees it (this layout, where it holds every layer). What a question
  // about the whole model (a file's tensors, a freeze pattern) is asked of.
  ParamLayout all_layers() const;
  // Its digest: alike on every pipeline stage of one model.
  uint64_t model_digest() const;

 private:
  void add_unit(UnitKind kind, const std::vector<ParamSpec>& specs, const std::string& prefix,
                const ArchSpec& spec, const ModelConfig& cfg, int64_t whole_begin);
  ModelConfig config_;
  std::vector<ParamInfo> params_;
  std::vector<Unit> units_;
  std::vector<int> block_unit_;  // by layer, -1 where not held
  bool has_embedding_ = false, has_final_ = false;
  int64_t total_ = 0;
};

// Calls fn(local, whole, count) for the runs of p's elements [begin, end) (indices into the
// slice held here) that are consecutive in the whole tensor too, with the index `whole` of the
// run's first element there, in order; one run for a parameter that is not cut.
void for_each_whole_run(const ParamInfo& p, int64_t begin, int64_t end,
                        const std::function<void(int64_t local, int64_t whole, int64_t count)>& fn);

// The inverse: calls fn(rank, local, whole, count) for the runs of elements [begin, end) of the
// whole tensor of parameter `p` that one slice of `degree` holds consecutively: the slice's rank
// and where the run starts in that slice. `p` may be the whole parameter or any slice of it.
void for_each_slice_run(
    const ParamInfo& p, int degree, int64_t begin, int64_t end,
    const std::function<void(int rank, int64_t local, int64_t whole, int64_t count)>& fn);

// The initial values of parameter `p` (p.numel floats into `out`) by its specification's rule;
// they depend only on (seed, p.name) and each element's place in the whole tensor, so any shard
// or tensor-parallel slice of the model can be initialised alone and agrees with the whole.
void init_param(const ParamInfo& p, uint64_t seed, float* out);
// Its elements [begin, end) into out[0..end-begin).
void init_param(const ParamInfo& p, uint64_t seed, int64_t begin, int64_t end, float* out);

}  // namespace trainer::nn
