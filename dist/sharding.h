// The shard geometry of the sharded stages (ZeRO-1/2/3) and the buffers it asks for, exposed
// for tests, plans and docs (dist/shard_plan.cpp); the sharded DataParallel that serves the
// model its units is dist/sharding.cpp.
//
// Note [Sharding stages]
// `optimizer` (ZeRO-1): each rank keeps the fp32 masters and AdamW moments of its slice;
// every rank keeps the full working weights and gradients; the gradients are
// reduce-scattered once per step (from the last micro-batch's backward, unit by unit) and
// the updated weights all-gathered after the step. `gradients` (ZeRO-2): the same, but a
// unit's full gradient lives only in a scratch buffer from its backward until its
// reduce-scatter, every micro-batch. `full` (ZeRO-3, FSDP's FULL_SHARD): the weights too
// exist only as shards; a unit is all-gathered into one of three buffers just before it is
// read (the next unit prefetched meanwhile) and is gone once two other units were gathered
// (`reshard_after_forward: false` keeps every unit gathered until the step ends instead).
// Gradients are summed in fp32 in the shard; the reduce-scatter runs in the gradient dtype.
//
// Note [Shard geometry]
// Per-unit slices: each unit (the embedding, each block, the final unit) is padded to a
// multiple of world * 16 elements and cut into `world` equal slices; rank r holds slice r of
// every unit, concatenated in unit order. One contiguous range per rank would make a
// unit's all-gather uneven (a unit straddles ranks), so ZeRO-3 could not gather one unit at a
// time with one equal-count collective; per-unit slices also give every rank an equal share
// of every unit's reduction work. The padding (under 16 * world elements per unit) is
// zero, never optimised, never saved: checkpoints hold global flat ranges.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/data_parallel.h"
#include "nn/adamw.h"
#include "nn/param_layout.h"

namespace trainer::dist {

class ShardGeometry {
 public:
  static constexpr int64_t kAlign = 16;  // elements: every slice starts 64-byte aligned

  ShardGeometry(const nn::ParamLayout& layout, int world, int rank);

  struct UnitShard {
    int64_t begin, end;  // the unit's global flat range
    int64_t shard;       // elements of each rank's slice (padded)
    int64_t local;       // where the slice starts in a rank's local buffers
    int64_t padded;      // where the unit starts in a padded full buffer (shard * world each)
    int64_t size() const { return end - begin; }
  };
  const std::vector<UnitShard>& units() const { return units_; }
  int world() const { return world_; }
  int rank() const { return rank_; }
  // Elements of a rank's local buffers (the sum of the slices) and of a padded full buffer.
  int64_t local_size() const { return local_size_; }
  int64_t padded_size() const { return local_size_ * world_; }
  // The real (unpadded) elements of unit u that rank r holds; empty when the slice is all
  // padding.
  nn::FlatSlice slice(int u, int r) const;
  // This rank's non-empty slices, in unit order.
  std::vector<nn::FlatSlice> slices() const;
  int64_t largest_unit_padded() const;

 private:
  std::vector<UnitShard> units_;
  int world_, rank_;
  int64_t local_size_ = 0;
};

// The buffers a sharded stage allocates, in elements (Note [Sharding stages]): planned here
// once, for the constructor and for planned_state_bytes alike. Local buffers hold this rank's
// slices; padded ones hold whole units, each rank's slice at rank * shard. "The embedding" is
// unit 0, which keeps slots of its own: on a pipeline stage without the embedding, that is
// its first block (Note [Pipeline stages] in nn/transformer.cpp).
struct ShardBuffers {
  int64_t masters = 0;            // fp32, local
  int64_t full_weights = 0;       // compute dtype, padded: every unit (all but full with reshard)
  int64_t embedding_weights = 0;  // compute dtype, padded embedding unit (full with reshard)
  int64_t weight_slot = 0;        // compute dtype, x kSlots: the largest other unit (the same)
  int64_t full_grads = 0;         // grad dtype, padded: every unit (optimizer)
  int64_t received = 0;           // grad dtype, local (optimizer: bf16 or deterministic)
  int64_t embedding_grad = 0;     // grad dtype, padded embedding unit (gradients, full)
  int64_t grad_slot = 0;          // grad dtype, x kSlots: the largest other unit (the same)
  int64_t grad_shard = 0;         // fp32, local: the step's summed gradient
  int world = 1;
  // Each gradient scratch buffer has a receive buffer of one rank's slice of it.
  int64_t slot_received() const { return (embedding_grad + kSlots * grad_slot) / world; }
  static constexpr int kSlots = 2;
};

// The sizes the buffers follow, in elements: a rank's local slices, the padded whole, the
// padded embedding unit and the largest other padded unit.
struct ShardSizes {
  int64_t local = 0, padded = 0, embedding = 0, largest_other = 0;
  int world = 1;
};

// The sizes of geometry g's buffers.
ShardSizes sizes_of(const ShardGeometry& g);
// The buffers a stage of `c` allocates for sizes z, with gradients in `grad`.
ShardBuffers plan_buffers(const ShardSizes& z, const ParallelConfig& c, DType grad);
// Their bytes, with the AdamW moments of `optimizer_state` elements.
StateBytes bytes_of(const ShardBuffers& b, DType compute, DType grad, int64_t optimizer_state);

// The sharded stages' state on rank 0 of `world` for `layout` (planned_state_bytes), and for a
// model of `params` elements without its units (an estimate before the layout exists).
StateBytes planned_sharded_bytes(const nn::ParamLayout& layout, const ParallelConfig& config,
                                 int world, DType compute, DType grad);
StateBytes sharded_bytes_for(int64_t params, const ParallelConfig& config, int world, DType compute,
                             DType grad);

}  // namespace trainer::dist
