// Note [Refusals]
// Every combination of options that a run refuses is one row below: when it applies, on the
// options as resolve_run parsed them, and the one-line message that names the keys, why, and
// (through docs/errors.md) the way out. resolve_run checks the table once, after reading every
// key and before deriving anything from them, so a refusal never depends on which derived
// check happened to run first, and a new combination to refuse is one row. Checks of one key's
// value (a range, a name) stay with the key in the schema; checks of shapes (whether a degree
// divides the model) stay where the shapes are derived.
#include "app/refusals.h"

#include <cstddef>

#include "runtime/error.h"

namespace trainer::app {

namespace {

// A message may name the values of the options it refuses: {grad_accum}, {global_batch},
// {virtual_stages}, {schedule} (check_combinations fills them in).
struct Refusal {
  bool (*applies)(const RunConfig& r);
  const char* message;
};

bool pipelined(const RunConfig& r) {
  return r.pipeline_parallel > 1;
}
bool interleaved(const RunConfig& r) {
  return r.pipeline_schedule == dist::PipelineSchedule::interleaved;
}

const Refusal kRefusals[] = {
    // Pipeline options without a pipeline, or at odds with each other.
    {[](const RunConfig& r) { return interleaved(r) && !pipelined(r); },
     "dist.pipeline_schedule = interleaved needs dist.pipeline_parallel > 1"},
    {[](const RunConfig& r) { return !r.pipeline_layers.empty() && !pipelined(r); },
     "dist.pipeline_layers needs dist.pipeline_parallel > 1"},
    {[](const RunConfig& r) { return interleaved(r) != (r.pipeline_chunks > 1); },
     "dist.pipeline_virtual_stages = {virtual_stages} with dist.pipeline_schedule = {schedule}: "
     "the interleaved schedule runs 2 or more virtual stages per stage, the others one"},
    // Sequence parallelism cuts the tensor group's tokens into equal slices.
    {[](const RunConfig& r) { return r.sequence_parallel && r.tensor_parallel == 1; },
     "dist.sequence_parallel needs dist.tensor_parallel > 1 (it cuts the tensor group's tokens)"},
    {[](const RunConfig& r) {
       return r.sequence_parallel && r.train_data.mode == data::Mode::bucket;
     },
     "dist.sequence_parallel cuts every batch's tokens into equal slices, but data.mode = bucket "
     "makes batches of varying shapes: use stream or pack"},
    // CUDA graphs replay a whole model's passes on fixed buffers.
    {[](const RunConfig& r) { return r.exec.cuda_graphs && r.exec.device != Device::cuda; },
     "train.cuda_graphs needs run.device = cuda"},
    {[](const RunConfig& r) {
       return r.exec.cuda_graphs && r.sharding != dist::ShardingStage::none;
     },
     "train.cuda_graphs runs with dist.sharding = none only, for now (a sharded unit's gathered "
     "weights change buffers from step to step)"},
    {[](const RunConfig& r) { return r.exec.cuda_graphs && r.tensor_parallel > 1; },
     "train.cuda_graphs runs with dist.tensor_parallel = 1 only, for now (a tensor group's "
     "collectives run inside forward and backward, outside any graph)"},
    {[](const RunConfig& r) { return r.exec.cuda_graphs && pipelined(r); },
     "train.cuda_graphs runs with dist.pipeline_parallel = 1 only, for now"},
    {[](const RunConfig& r) { return r.backend == Backend::nccl && r.exec.device != Device::cuda; },
     "dist.backend = nccl needs run.device = cuda (NCCL connects GPUs)"},
    // Task scores need the whole vocabulary's logits of the whole model.
    {[](const RunConfig& r) { return !r.eval_tasks.empty() && pipelined(r); },
     "train.eval_tasks runs with dist.pipeline_parallel = 1 only, for now (no stage holds the "
     "whole model)"},
    {[](const RunConfig& r) { return !r.eval_tasks.empty() && r.tensor_parallel > 1; },
     "train.eval_tasks runs with dist.tensor_parallel = 1 only, for now (a tensor group's "
     "logits are cut by vocabulary)"},
    // World-size-invariant sums (Note [World-size-invariant sums]).
    {[](const RunConfig& r) { return r.deterministic && pipelined(r); },
     "dist.deterministic is not implemented with dist.pipeline_parallel > 1 yet (its reduction "
     "trees and exact norm span the data-parallel ranks of a whole model)"},
    {[](const RunConfig& r) { return r.deterministic && r.tensor_parallel > 1; },
     "dist.deterministic is not implemented with dist.tensor_parallel > 1 yet (its exact norm "
     "and reduction trees span the data-parallel ranks only)"},
    {[](const RunConfig& r) { return r.deterministic && r.exec.device != Device::cpu; },
     "dist.deterministic is implemented for CPU runs (MPI), not yet for run.device = cuda"},
    {[](const RunConfig& r) { return r.deterministic && r.exec.grad != DType::f32; },
     "dist.deterministic needs dist.grad_dtype = fp32 (bf16 sums round at every node of the "
     "tree)"},
    // A mixture's phases are steps, which its loader counts in global batches.
    {[](const RunConfig& r) {
       return !r.train_data.mixture.phases.empty() && !r.grad_accum_schedule.entries.empty();
     },
     "data.sources_schedule with train.grad_accum_schedule: the mixture counts steps in global "
     "batches, which must be the same number every step"},
    {[](const RunConfig& r) {
       return !r.train_data.mixture.sources.empty() && r.train_data.max_epochs > 0;
     },
     "data.epochs with data.sources: bound each source instead (DIR:WEIGHT:EPOCHS)"},
    // The batch is set one way.
    {[](const RunConfig& r) { return r.global_batch > 0 && r.grad_accum != 1; },
     "train.grad_accum = {grad_accum} and train.global_batch = {global_batch} both set the batch: "
     "keep one"},
};

}  // namespace

void check_combinations(const RunConfig& r) {
  for (const Refusal& x : kRefusals)
    if (x.applies(r))
      throw UsageError(fmt::format(
          fmt::runtime(x.message), fmt::arg("grad_accum", r.grad_accum),
          fmt::arg("global_batch", r.global_batch), fmt::arg("virtual_stages", r.pipeline_chunks),
          fmt::arg("schedule", dist::kPipelineScheduleNames.name(r.pipeline_schedule))));
}

std::vector<std::string> refusal_messages() {
  std::vector<std::string> out;
  for (const Refusal& x : kRefusals) out.emplace_back(x.message);
  return out;
}

}  // namespace trainer::app
