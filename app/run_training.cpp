// The process a training run needs: stop signals blocked before any thread starts, the launch
// discovered, logging, the communicators and, on CUDA, the rank's GPU and stream; then the
// memory check, the MFU reference, and the loop.
#include "app/run_training.h"

#include <memory>

#include "app/dropout_keys.h"
#include "app/hf_folder.h"
#include "app/memory_plan.h"
#include "app/model_source.h"
#include "app/run_setup.h"
#include "app/stop_signals.h"
#include "app/train_loop.h"
#include "dist/communicator.h"
#include "dist/grid.h"
#include "dist/launch.h"
#include "nn/lora.h"
#include "nn/pipeline_split.h"
#include "nn/transformer.h"
#include "runtime/cuda/stream.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/gemm.h"
#include "runtime/log.h"
#include "runtime/memory.h"

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

PeakReference peak_reference(const RunConfig& rc) {
  if (rc.peak_gflops > 0)
    return {rc.peak_gflops,
            fmt::format("log.peak_gflops = {:.0f} GFLOP/s (stated)", rc.peak_gflops)};
  const GemmPeak p = measure_gemm_peak_stable(nn::context_for(rc.exec), rc.exec.compute);
  return {p.gflops,
          fmt::format(
              "a {} GEMM peak of {:.0f} GFLOP/s measured at start-up ({}; set log.peak_gflops to "
              "fix it)",
              float_dtype_name(rc.exec.compute), p.gflops,
              p.stable ? fmt::format("stable within 3% over {} rounds", p.rounds)
                       : fmt::format("still changing after {} rounds: a busy machine?", p.rounds))};
}

// Relative data paths are made absolute, so that the run's saved config (and eval, sample or
// export of its checkpoints) works from any working directory.
Config with_absolute_paths(Config c) {
  auto absolute = [](const fs::path& p) {
    return p.empty() || p.is_absolute() ? p.string() : fs::absolute(p).lexically_normal().string();
  };
  for (const char* key : {"data.path", "data.tokenizer", "train.init_from"})
    c.set(key, absolute(c.text(key)));
  std::vector<std::string> tasks;
  for (const std::string& t : c.list("train.eval_tasks")) tasks.push_back(absolute(t));
  c.set("train.eval_tasks", tasks);
  map_corpus_dirs(c, [&](const std::string& dir) { return absolute(dir); });
  return c;
}

// `c` with the model keys it leaves out taken from `source`, a saved run's config, and its
// dropout where `c` states none.
Config with_model_keys_of(Config c, const Config& source) {
  for (const char* key : model_keys())
    if (!c.stated(key)) c.set(key, source.value(key));
  inherit_dropout(c, stated_model(source).dropout);
  return fit_seq_len(c);
}

// Fine-tuning: the model keys the config leaves out come from the source at `from`, a Hugging
// Face folder's config.json or a checkpoint's config (those it states must agree: init_from.h);
// a PEFT adapter's from its base, and train.lora's from its adapter_config.json. Reads configs
// only: the source's weights are checked once, when the run opens it.
Config with_source_model(Config c, const fs::path& from, const std::string& what) {
  switch (source_kind(from)) {
    case SourceKind::hf_folder:
      return fit_seq_len(with_hf_model(c, from, what));
    case SourceKind::checkpoint:
    case SourceKind::run_dir: {
      const fs::path file = source_dir(from) / "config.yaml";
      Config saved;
      saved.merge_yaml(read_file(file), file.string());
      return with_model_keys_of(c, saved);
    }
    case SourceKind::peft_adapter: {
      const PeftAdapterConfig a = read_peft_adapter(from);
      const bool dropout_stated = c.stated("train.lora.dropout");
      c = with_source_model(c, a.base, what);
      Config adapter = c;
      set_lora_keys(adapter, nn::lora_from_peft(a.config, stated_model(c), a.file.string()));
      for (const char* key : lora_keys())
        if (!c.stated(key)) c.set(key, adapter.value(key));
      if (!dropout_stated && c.integer("train.lora.rank") > 0)  // its rate trains it on
        c.set("train.lora.dropout",
              nn::as_decimal(nn::lora_dropout_from_peft(a.config, a.file.string())));
      return c;
    }
    case SourceKind::none:  // named when the run opens it
      return c;
  }
  return c;
}

Config with_init_model(const Config& c) {
  const fs::path from = c.text("train.init_from");
  if (from.empty()) return c;
  return with_source_model(c, from, fmt::format("train.init_from = {}", from.string()));
}

}  // namespace

int run_training(const Config& config, const TrainOptions& options) {
  check_training_paths(config);
  block_stop_signals();  // Note [Stop signals]
#pragma omp parallel
  {
    // OpenMP's threads start here, blocking the stop signals.
  }
  const dist::LaunchInfo launch = dist::discover_launch();
  log::configure(launch.rank, launch.world_size);  // what resolving warns of: rank 0's, once
  // Every key is read once, here, before anything starts: a bad config ends each rank at once.
  const Config absolute = with_init_model(with_absolute_paths(config));
  RunConfig rc = resolve_run(absolute);
  log::configure(launch.rank, launch.world_size, rc.log_level, rc.log_all_ranks);
  dist::CommOptions comm_options{.timeout_s = rc.timeout_s, .interface = rc.interface};
  auto comm = dist::make_communicator(launch, comm_options);
  // A CUDA run takes GPU local rank, queues its work on a stream of its own, and talks to
  // other GPUs over NCCL (its id sent over MPI, host buffers still through MPI), whose
  // collectives follow that stream.
  std::unique_ptr<CudaStream> stream;
  std::unique_ptr<dist::Communicator> nccl;
  if (rc.exec.device == Device::cuda) {
    rc.exec.device_index = dist::bind_device(launch);
    if (rc.exec.device_index < 0)
      throw UsageError(
          cuda_built() ? fmt::format("run.device = cuda but rank {} sees no CUDA GPU", launch.rank)
                       : std::string("run.device = cuda but this trainer was built "
                                     "without the CUDA backend (TRAINER_CUDA=ON)"));
    // What runs is what the loader found, not what the build saw: said once, by rank 0.
    log::info("{}, NCCL {}", cuda_versions(), dist::nccl_version());
    stream = std::make_unique<CudaStream>();
    rc.exec.stream = comm_options.cuda_stream = stream->get();
    if (comm->size() > 1 || rc.backend == Backend::nccl)
      nccl = dist::make_nccl_communicator(*comm, rc.exec.device_index, comm_options);
  }
  dist::Grid grid(nccl ? *nccl : *comm, rc.tensor_parallel, rc.pipeline_parallel, launch);
  rc.model.tensor.degree = grid.tensor_size();
  rc.model.tensor.rank = grid.tensor_rank();
  if (grid.pipeline_size() > 1) {  // this stage's layers, and the micro-batches it holds
    const int P = grid.pipeline_size();
    rc.model.pipeline = nn::stage_slice(rc.pipeline_split, P, grid.stage());
    rc.exec.activation_slots = held_micro_batches(rc, rc.pipeline_schedule, rc.pipeline_chunks,
                                                  grid.stage(), grid.data().size());
  }
  // GPUs are one per rank; CPU ranks on a node share its memory.
  check_memory(*comm, plan_memory(rc, grid.data().size(), comm->rank()), rc.exec.device,
               rc.exec.device == Device::cuda ? 1 : launch.local_size, launch.local_size,
               rc.memory_check == MemoryCheck::warn);
  const PeakReference peak = peak_reference(rc);
  TrainLoop loop(absolute, std::move(rc), options, grid, peak);
  return loop.run();
}

}  // namespace trainer::app
