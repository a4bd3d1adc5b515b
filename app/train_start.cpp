// The loop's start-up: which checkpoint to resume or initialise from (rank 0 decides), the
// checks that a resume is one (same data order, same model) and that nothing of an earlier run
// is lost (Note [One run per directory]), the data's checks, and the state set up.
#include "app/train_loop.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "app/hf_folder.h"
#include "app/init_from.h"
#include "data/tokenizer.h"
#include "dist/consistency.h"
#include "dist/data_parallel.h"
#include "dist/hosts.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"
#include "runtime/rng.h"

#include <nlohmann/json.hpp>

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

// Whether checkpoint `from` (empty: none) is one of run_dir's own.
bool is_own_checkpoint(const fs::path& from, const fs::path& run_dir) {
  std::error_code ec;
  return !from.empty() && fs::weakly_canonical(from.parent_path(), ec) ==
                              fs::weakly_canonical(run_dir / "checkpoints", ec);
}

// Keys that give the loader's saved position its meaning, and keys that define the model
// without changing tensor shapes (n_head, train.lora.alpha): changing either on resume is
// refused.
// `then` is the checkpoint's config.yaml.
void check_resumable(const Config& now, const Config& then, const Checkpoint& ckpt) {
  // A config that does not fit the checkpoint is the user's to change: a usage error (exit 2).
  for (const char* key : {"run.seed", "data.mode", "data.batch_size", "data.seq_len",
                          "data.max_tokens", "data.drop_last"})
    if (then.to_yaml_value(key) != now.to_yaml_value(key))
      throw UsageError(fmt::format(
          "cannot resume from {}: {} was {} there but is {} now (it defines the data order)",
          ckpt.dir.string(), key, then.to_yaml_value(key), now.to_yaml_value(key)));
  std::vector<const char*> model = model_keys();
  model.insert(model.end(), lora_keys().begin(), lora_keys().end());
  for (const char* key : model)
    if (then.to_yaml_value(key) != now.to_yaml_value(key))
      throw UsageError(fmt::format(
          "cannot resume from {}: {} was {} there but is {} now (another model; start a new "
          "run, or set train.resume=none with --force)",
          ckpt.dir.string(), key, then.to_yaml_value(key), now.to_yaml_value(key)));
}

}  // namespace

// train.global_batch (and its schedule) must share out evenly; dist.deterministic's trees need
// a power-of-two world.
void TrainLoop::check_batch_over_ranks() const {
  const int w = data_.size();
  if (rc_.deterministic && (w & (w - 1)) != 0)
    throw UsageError(fmt::format(
        "dist.deterministic needs a power-of-two number of ranks (its reduction tree pairs "
        "them), not {}",
        w));
  if (rc_.global_batch == 0) return;
  std::vector<std::pair<int64_t, int64_t>> sizes = {{0, rc_.global_batch}};
  for (const auto& e : rc_.grad_accum_schedule.entries) sizes.push_back(e);
  for (const auto& [step, g] : sizes)
    if (g % w != 0)
      throw UsageError(fmt::format(
          "train.global_batch{}: {} micro-batches do not share out over {} ranks (use a multiple "
          "of the number of ranks)",
          step > 0 ? fmt::format(" from step {}", step) : "", g, w));
}

// What a resume may change but the log should say (the products' thread count, the dropout
// rates, the data ranks without train.global_batch); `saved` is the checkpoint's config.
void TrainLoop::warn_of_changes(const Checkpoint& ckpt, const Config& saved) const {
  // oneDNN's products split their sums by thread: another count gives other bits from here.
  const Context& ctx = model_.context();
  if (leader_ && ctx.device == Device::cpu && ckpt.state.threads > 0 &&
      ckpt.state.threads != op_threads(ctx))
    log::warn(
        "resuming a run saved with {} CPU threads per rank on {}: the products sum in another "
        "order, so the steps from here are not the bits the run would have given{} "
        "(OMP_NUM_THREADS={} keeps them)",
        ckpt.state.threads, op_threads(ctx),
        rc_.deterministic ? ", dist.deterministic notwithstanding" : "", ckpt.state.threads);
  // Other dropout rates are the user's choice; the steps from here are then not the run's.
  const nn::DropoutRates was = stated_model(saved).dropout, is = rc_.model.dropout;
  if (leader_ && was != is)
    log::warn(
        "resuming with dropout rates (embeddings, attention, residual, LoRA adapters) {:g}, {:g}, "
        "{:g}, {:g} where the checkpoint's run had {:g}, {:g}, {:g}, {:g}: the steps from here are "
        "not that run's",
        is.embedding, is.attention, is.residual, is.adapter, was.embedding, was.attention,
        was.residual, was.adapter);
  const int then =
                ckpt.state.world_size / (ckpt.state.tensor_parallel * ckpt.state.pipeline_parallel),
            now = data_.size();
  if (rc_.global_batch > 0 || then == now || !leader_) return;
  log::warn(
      "resuming a run of {} data-parallel rank(s) on {} with train.grad_accum per rank: the "
      "global batch changes from {} to {} micro-batches per step (set train.global_batch to "
      "keep it)",
      then, now, micro_batches(state_.step) * then, micro_batches(state_.step) * now);
}

// Rank 0 chooses the checkpoint to resume from and every rank opens that one, so ranks
// without a shared view of `latest` cannot start from different states.
fs::path TrainLoop::resume_path() {
  std::string path;
  if (leader_) {
    if (rc_.resume == "auto")
      path = latest_checkpoint(rc_.run_dir).string();
    else if (rc_.resume != "none")
      path = checkpoint_dir_of(rc_.resume).string();
  }
  return from_leader(path);
}

// The same for train.init_from: a run directory (a live one too) means the checkpoint its
// `latest` names when rank 0 looks; a checkpoint or a folder is itself (source_dir).
fs::path TrainLoop::init_path() {
  return from_leader(leader_ ? source_dir(rc_.init_from).string() : std::string());
}

// Rank 0's `text` on every rank (a collective).
std::string TrainLoop::from_leader(std::string text) {
  if (comm_.size() == 1) return text;
  int64_t n = int64_t(text.size());
  comm_.broadcast(&n, sizeof n);
  text.resize(size_t(n));
  if (n > 0) comm_.broadcast(text.data(), n);
  return text;
}

// Note [One run per directory]: what this start would discard of the run directory's earlier
// run. Continuing from the run's own checkpoint discards nothing (metrics logged after it are
// rewritten as the steps are redone); starting afresh, or from another run's checkpoint,
// would mix with or replace everything the directory holds; rewinding to an older checkpoint
// of the run would replace its later ones. Any of those is refused unless --force, which
// deletes them once every other check has passed. Returns what --force is to delete.
std::vector<fs::path> TrainLoop::check_overwrite(const fs::path& from, int64_t start_step) {
  const fs::path metrics = rc_.run_dir / "metrics.jsonl";
  std::error_code ec;
  const bool own = is_own_checkpoint(from, rc_.run_dir);
  std::vector<fs::path> discard;
  for (const auto& [step, dir] : list_checkpoints(rc_.run_dir))
    if (!own || step > start_step) discard.push_back(dir);
  const bool has_metrics = fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0;
  if (!own && has_metrics) discard.push_back(metrics);
  // The earlier run's TensorBoard events go with its metrics (log.tensorboard).
  if (!own && fs::exists(rc_.run_dir / "tensorboard", ec))
    discard.push_back(rc_.run_dir / "tensorboard");
  if (discard.empty()) return {};
  const std::string what =
      own ? fmt::format("resuming from step {} would replace its {} later checkpoint(s)",
                        start_step, discard.size())
      : from.empty()
          ? "this run starts afresh"
          : fmt::format("this run starts from {}, another run's checkpoint", from.string());
  if (!options_.force)
    throw UsageError(fmt::format(
        "{} already holds a run ({} checkpoint(s){}) and {}: pass --force to delete {} first, or "
        "choose another run.name",
        rc_.run_dir.string(), list_checkpoints(rc_.run_dir).size(),
        has_metrics ? ", metrics.jsonl" : "", what, own ? "them" : "that run"));
  return discard;
}

// Everything about the data that can fail later is checked before the first step.
void TrainLoop::check_data() {
  for (const auto& corpus : loader_->corpora()) {  // data.path, or every source
    const data::Manifest& m = corpus->manifest();
    USAGE_CHECK(data::tokenizer_is(tokenizer_, m.tokenizer_hash),
                "data.tokenizer = {} is not the tokenizer {} was prepared with (hash {:016x}, "
                "the manifest says {:016x}, {})",
                rc_.tokenizer.string(), corpus->dir().string(), tokenizer_hash_, m.tokenizer_hash,
                m.tokenizer_file);
  }
  if (rc_.val_every == 0) return;
  for (ValSet& set : rc_.val_sets) {
    const std::string what =
        set.name.empty() ? "the validation data" : fmt::format("train.val_sets' {}", set.name);
    // What the user can fix by the keys (an InternalError is no Error).
    auto unreadable = [&](const Error& e) {
      return UsageError(fmt::format(
          "train.val_every = {} but {} cannot be read: {} (set train.val_every=0 to train "
          "without validation)",
          rc_.val_every, what, e.what()));
    };
    data::Manifest vm;
    try {
      vm = data::read_manifest(set.data.data_dir);
    } catch (const Error& e) {
      throw unreadable(e);
    }
    // Every validation checks the shards' tokenizer (as the manifest records it: a corpus
    // prepared before the content hash records the hash of the file's bytes).
    USAGE_CHECK(data::tokenizer_is(tokenizer_, vm.tokenizer_hash),
                "{} ({}) was prepared with another tokenizer ({}, hash {:016x}) than the run's "
                "data.tokenizer = {}",
                what, set.data.data_dir.string(), vm.tokenizer_file, vm.tokenizer_hash,
                rc_.tokenizer.string());
    set.data.tokenizer_hash = vm.tokenizer_hash;
    std::optional<data::Batch> first;
    try {
      data::Loader val(set.data, data_.rank(), data_.size());
      first = val.next();
    } catch (const Error& e) {
      throw unreadable(e);
    }
    // Agreed: a rank whose share is empty idles through the others' batches, and only a set
    // with no batch on any rank is refused, by every rank alike.
    std::vector<double> have = {first ? 1.0 : 0.0};
    if (comm_.size() > 1) comm_.all_reduce(have);
    USAGE_CHECK(have[0] > 0,
                "train.val_every = {} but the {} split of {} yields no batch of this shape ({}, "
                "or set train.val_every=0)",
                rc_.val_every, set.data.split, set.data.data_dir.string(),
                set.data.split == "val" ? "prepare with a larger --val-fraction"
                                        : "it holds too few tokens for one batch");
  }
  // Under `all` their shards were checked just now; under first_use each validation checks
  // what it reads.
  val_verified_ = rc_.train_data.verify == data::Verify::all;
}

// Note [Shared run directory]: ranks on several nodes write one run directory (each its
// checkpoint shards, its log), so every node must see the same one. Rank 0 writes a file of
// random name and content there and every rank reads it back (a new name, so no network file
// system's cache can remember it missing; up to a second for one slow to show it); a node that
// sees none, or another, is refused at start-up with its ranks named, before anything is
// trained and saved where rank 0 cannot find it.
void TrainLoop::check_shared_run_dir() {
  if (comm_.size() == 1) return;
  uint64_t token = 0;
  if (leader_) token = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  comm_.broadcast(&token, sizeof token);
  // A name of its own each time: a network file system's cache never remembers it missing.
  const fs::path probe = rc_.run_dir / fmt::format(".shared-check-{:016x}", token);
  const std::string want = fmt::format("{:016x}\n", token);
  if (leader_) write_file_atomic(probe, want);
  comm_.barrier();
  int64_t seen = 0;  // 0: the file, 1: none, 2: another
  // A second for a file system slow to show a new file, well inside the collective's timeout.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration<double>(std::min(1.0, rc_.timeout_s / 4));
  for (;;) {
    std::error_code ec;
    seen = !fs::exists(probe, ec) ? 1 : read_file(probe) == want ? 0 : 2;
    if (seen == 0 || std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::vector<int64_t> all = comm_.all_gather(std::vector<int64_t>{seen});
  if (leader_) fs::remove(probe);
  std::vector<int> none, other;
  for (int r = 0; r < comm_.size(); ++r)
    if (all[size_t(r)] != 0) (all[size_t(r)] == 1 ? none : other).push_back(r);
  if (none.empty() && other.empty()) return;
  const std::vector<int>& first = none.empty() ? other : none;
  const bool one = first.size() == 1;
  throw UsageError(fmt::format(
      "run.dir {} is not shared between the nodes: {} {} the file rank 0 wrote there; put "
      "run.dir on a file system every node mounts (NFS, Lustre, GPFS), not a node's own disk",
      rc_.run_dir.string(), dist::ranks_on_hosts(first, comm_.hosts()),
      none.empty() ? (one ? "sees another file in place of" : "see another file in place of")
                   : (one ? "does not see" : "do not see")));
}

void TrainLoop::start_up() {
  // A run directory this start creates goes again if a check refuses the start.
  RemoveUnlessKept created;
  if (leader_) {
    if (!fs::exists(rc_.run_dir)) created.add(rc_.run_dir);
    std::error_code ec;
    fs::create_directories(rc_.run_dir, ec);
    USAGE_CHECK(!ec, "run.dir = {}: cannot create the run's folder {}: {}",
                rc_.run_dir.parent_path().string(), rc_.run_dir.string(), ec.message());
    try {
      lock_ = std::make_unique<ExclusiveLock>(rc_.run_dir / ".lock");
    } catch (const ExclusiveLock::Busy& busy) {
      THROW_ERROR(
          "run directory {} is in use by another trainer ({}): one trainer per run "
          "directory",
          rc_.run_dir.string(), busy.holder());
    }
  }
  check_shared_run_dir();
  if (leader_) finish_interrupted_saves(rc_.run_dir);  // before `latest` is read
  const fs::path tokenizer_path = rc_.tokenizer;
  if (!fs::exists(tokenizer_path))
    throw UsageError(fmt::format("data.tokenizer = {} does not exist", tokenizer_path.string()));
  if (fs::is_directory(tokenizer_path) && !hf_folder_has_tokenizer(tokenizer_path))
    throw UsageError(
        fmt::format("data.tokenizer = {} is a directory holding no tokenizer (tokenizer.model, "
                    "tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe)",
                    tokenizer_path.string()));
  {
    const data::Tokenizer tokenizer(tokenizer_path);
    tokenizer_ = tokenizer.bytes();  // the one-file form the run and its checkpoints keep
    tokenizer_hash_ = tokenizer.hash();
  }
  // The corpus the data position points into: data.path's, or every source's in order.
  const data::MixtureConfig& mixture = rc_.train_data.mixture;
  if (mixture.sources.empty())
    data_manifest_ = read_file(rc_.train_data.data_dir / data::kManifestName);
  for (const data::MixtureSource& s : mixture.sources)
    data_manifest_ += read_file(s.data_dir / data::kManifestName);

  // Every check first (Note [One run per directory]): nothing in the run directory is written
  // or deleted until all of them, and the ranks' agreement, have passed.
  const fs::path from = resume_path();
  std::optional<Checkpoint> ckpt;
  if (!from.empty()) {
    ckpt = open_checkpoint(from);
    Config saved;  // the checkpoint's config, for what may and may not change
    saved.merge_yaml(ckpt->config_yaml, (ckpt->dir / "config.yaml").string());
    check_resumable(config_, saved, *ckpt);
    if (!data::tokenizer_is(tokenizer_, ckpt->state.tokenizer_hash))
      throw UsageError(fmt::format(
          "cannot resume from {}: it was trained with tokenizer {:016x} but data.tokenizer = {} "
          "is {:016x}",
          from.string(), ckpt->state.tokenizer_hash, tokenizer_path.string(), tokenizer_hash_));
    if (ckpt->state.data_hash != 0 && ckpt->state.data_hash != hash64(data_manifest_))
      throw UsageError(fmt::format(
          "cannot resume from {}: the corpus in {} changed since it was saved (its manifest "
          "differs); the saved data position would point elsewhere",
          from.string(),
          mixture.sources.empty() ? rc_.train_data.data_dir.string()
                                  : std::string("one of data.sources")));
    state_ = ckpt->state;
    warn_of_changes(*ckpt, saved);
  }
  // Fine-tuning starts a new run (not a resume) from saved weights; checked now, loaded below.
  std::optional<InitSource> init;
  if (!ckpt && !rc_.init_from.empty())
    init = open_init_source(init_path(), config_, model_.layout(), tokenizer_hash_, rc_.seed);
  const std::vector<fs::path> discard =
      leader_ ? check_overwrite(from, state_.step) : std::vector<fs::path>{};
  std::optional<data::LoaderState> loader_state;
  if (ckpt) loader_state = ckpt->state.loader.get<data::LoaderState>();
  // A mixture counts steps in global batches from here (Note [Mixtures]).
  rc_.train_data.mixture.first_step = state_.step;
  rc_.train_data.mixture.batches_per_step = micro_batches(state_.step) * data_.size();
  loader_ =
      std::make_unique<data::Loader>(rc_.train_data, data_.rank(), data_.size(), loader_state);
  check_data();
  {
    const data::Tokenizer tok(tokenizer_, rc_.tokenizer);
    tasks_ = read_tasks(rc_.eval_tasks, tok,
                        {transformer_.exec().max_seq_len, rc_.model.vocab_size,
                         std::max(0, tok.eos_id())});  // documents follow an eos here
  }
  state_.tokenizer_hash = tokenizer_hash_;
  state_.data_hash = hash64(data_manifest_);
  state_.world_size = comm_.size();
  state_.tensor_parallel = grid_.tensor_size();
  state_.pipeline_parallel = grid_.pipeline_size();
  state_.threads = op_threads(model_.context());
  state_.hosts = comm_.hosts();
  // The source's weights are read (and their values checked) before the run directory is
  // written: broken weights refuse the start, leaving nothing behind.
  if (init) load_init_weights(*init, model_, *dp_, comm_);
  dist::check_consistency(
      comm_, {{"the resolved config",
               fmt::format("{}resumed at step: {}\n", config_.to_yaml(), state_.step)},
              {"the trainer binary", dist::binary_identity()},
              {"the data manifest", data_manifest_},
              {"the tokenizer", tokenizer_},
              {"the parameter layout", fmt::format("{:016x}", model_.layout().model_digest())}});

  created.keep();
  if (leader_) {
    for (const fs::path& p : discard) {
      log::warn("--force: deleting {}", p.string());
      fs::remove_all(p);
    }
    if (ckpt && !discard.empty() && fs::is_symlink(rc_.run_dir / "checkpoints/latest"))
      repoint_latest(rc_.run_dir, ckpt->dir);
    log::set_file((rc_.run_dir / "train.log").string());
    const std::set<std::string> nodes(comm_.hosts().begin(), comm_.hosts().end());
    if (nodes.size() > 1)
      log::info("{} ranks on {} nodes ({}), between them over {}", comm_.size(), nodes.size(),
                dist::placement(comm_.hosts()), comm_.network());
    else if (comm_.size() > 1)
      log::info("{} ranks on {}", comm_.size(), *nodes.begin());
    fs::remove(rc_.run_dir / kStoppedMarker);  // an earlier launch's
    write_file_atomic(rc_.run_dir / "config.yaml", config_.to_yaml());
    write_file_atomic(rc_.run_dir / data::tokenizer_file_name(tokenizer_), tokenizer_);
  }
  if (!leader_) log::set_run_log((rc_.run_dir / "train.log").string());
  if (!leader_ && rc_.log_all_ranks) {
    fs::create_directories(rc_.run_dir / "logs");
    log::set_file((rc_.run_dir / "logs" / fmt::format("rank-{}.log", comm_.rank())).string());
  }
  if (ckpt) {
    load_training_state(*ckpt, model_, *dp_);
    spikes_.restore(state_.spike_guard);
    // This run's own checkpoint of the step is there; another run's (a branch's start) is not.
    // Rank 0 decides: save() is a collective that returns at once for a saved step.
    if (!from_leader(leader_ && is_own_checkpoint(from, rc_.run_dir) ? "own" : "").empty())
      saved_step_ = state_.step;
    log::info("resumed from {} at step {}", from.string(), state_.step);
  } else if (init) {
    log::info("fine-tuning from {}: its weights, a fresh optimizer, step 0", init->source.name());
  } else {
    dist::init_masters(*dp_, model_, rc_.seed);
  }
  first_step_ = state_.step;
  first_tokens_ = state_.tokens_seen;
  if (leader_)
    metrics_ = std::make_unique<MetricsLog>(
        rc_.run_dir / "metrics.jsonl", ckpt ? state_.step : -1,
        rc_.tensorboard ? rc_.run_dir / "tensorboard" : std::filesystem::path());
}

}  // namespace trainer::app
