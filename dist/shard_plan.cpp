// The sharded stages' geometry and buffer plan (dist/sharding.h): where each rank's slices
// lie, and what the stage allocates around them, for the sharded DataParallel and for plans.
#include <algorithm>

#include "dist/sharding.h"
#include "runtime/error.h"

namespace trainer::dist {

ShardGeometry::ShardGeometry(const nn::ParamLayout& layout, int world, int rank)
    : world_(world), rank_(rank) {
  TRAINER_ASSERT(world >= 1 && rank >= 0 && rank < world, "rank {} of {}", rank, world);
  for (const nn::Unit& u : layout.units()) {
    const int64_t per_rank = (u.end - u.begin + world - 1) / world;
    const int64_t shard = (per_rank + kAlign - 1) / kAlign * kAlign;
    units_.push_back({u.begin, u.end, shard, local_size_, local_size_ * world});
    local_size_ += shard;
  }
}

nn::FlatSlice ShardGeometry::slice(int u, int r) const {
  const UnitShard& x = units_[size_t(u)];
  const int64_t b = std::min(x.begin + r * x.shard, x.end);
  return {b, std::min(b + x.shard, x.end), x.local};
}

std::vector<nn::FlatSlice> ShardGeometry::slices() const {
  std::vector<nn::FlatSlice> out;
  for (size_t u = 0; u < units_.size(); ++u)
    if (const nn::FlatSlice s = slice(int(u), rank_); s.size() > 0) out.push_back(s);
  return out;
}

int64_t ShardGeometry::largest_unit_padded() const {
  int64_t n = 0;
  for (const UnitShard& u : units_) n = std::max(n, u.shard * world_);
  return n;
}

ShardSizes sizes_of(const ShardGeometry& g) {
  ShardSizes z{g.local_size(), g.padded_size(), g.units().front().shard * g.world(), 0, g.world()};
  for (size_t u = 1; u < g.units().size(); ++u)
    z.largest_other = std::max(z.largest_other, g.units()[u].shard * g.world());
  return z;
}

ShardBuffers plan_buffers(const ShardSizes& z, const ParallelConfig& c, DType grad) {
  const StageRecord stage = stage_record(c.sharding);
  ShardBuffers b;
  b.world = z.world;
  b.masters = z.local;
  if (stage.weights_by_unit && c.reshard_after_forward) {
    b.embedding_weights = z.embedding;
    b.weight_slot = z.largest_other;
  } else {
    b.full_weights = z.padded;
  }
  if (!stage.grads_by_unit) {
    b.full_grads = z.padded;
    b.received = grad == DType::f32 && !c.deterministic ? 0 : z.local;
  } else {
    b.embedding_grad = z.embedding;
    b.grad_slot = z.largest_other;
  }
  b.grad_shard = z.local;
  return b;
}

StateBytes bytes_of(const ShardBuffers& b, DType compute, DType grad, int64_t optimizer_state) {
  const int64_t cs = int64_t(dtype_size(compute)), gs = int64_t(dtype_size(grad));
  StateBytes s;
  s.masters = b.masters * 4;
  s.optimizer = optimizer_state * 2 * 4;
  s.grads = b.grad_shard * 4;
  s.working = b.full_weights * cs;
  s.grads += b.full_grads * gs;
  s.buffers =
      (b.embedding_weights + ShardBuffers::kSlots * b.weight_slot) * cs +
      (b.embedding_grad + ShardBuffers::kSlots * b.grad_slot + b.received + b.slot_received()) * gs;
  return s;
}

StateBytes planned_sharded_bytes(const nn::ParamLayout& layout, const ParallelConfig& config,
                                 int world, DType compute, DType grad) {
  const ShardGeometry geo(layout, world, 0);
  const int64_t state = nn::AdamW::state_size_of(layout, geo.slices(), config.is_frozen);
  return bytes_of(plan_buffers(sizes_of(geo), config, grad), compute, grad, state);
}

StateBytes sharded_bytes_for(int64_t params, const ParallelConfig& config, int world, DType compute,
                             DType grad) {
  const int64_t local = (params + world - 1) / world;
  const ShardSizes z{local, local * world, 0, 0, world};  // no unit buffers
  return bytes_of(plan_buffers(z, config, grad), compute, grad, local);
}

}  // namespace trainer::dist
