#include "app/run_checkpoints.h"

#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"

namespace trainer::app {

namespace fs = std::filesystem;

using nlohmann::json;

namespace {

// The step of a directory named exactly "step-<digits>", or -1.
int64_t step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!name.starts_with("step-")) return -1;
  int64_t step = -1;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && end == last && first != last ? step : -1;
}

// Points `latest` at `name` (a directory in root) atomically.
void point_latest(const fs::path& root, const std::string& name) {
  const fs::path link_tmp = root / "latest.tmp";
  fs::remove(link_tmp);
  fs::create_directory_symlink(name, link_tmp);
  fs::rename(link_tmp, root / "latest");
  fsync_path(root);
}

// Whether the checkpoint in `dir` was written under `policy` (its manifest records the policy
// since format version 2; an older or unreadable one counts as written under another).
bool written_under(const fs::path& dir, const CheckpointPolicy& policy) {
  try {
    const json m = json::parse(read_file(dir / kCheckpointManifest));
    return m.contains("retention") && m.at("retention") == retention_json(policy);
  } catch (const std::exception&) {
    return false;
  }
}

// Note [Retention]: a save removes checkpoints older than `current` beyond the newest
// keep_last (sparing keep_every multiples), but only those written under the same policy (by
// this run, or by the runs it resumed, while the policy was this one): a resume with another
// keep_last or keep_every deletes none of the checkpoints written before the change, unless
// `all` (train --force). Removes unfinished ".tmp" directories (no manifest yet) left by a
// killed save; a complete one is a checkpoint and stays. Never touches `current`, anything
// newer, or what `latest` names.
void prune(const fs::path& root, int64_t current, const CheckpointPolicy& policy, bool all) {
  std::error_code ec;
  const std::string latest = fs::read_symlink(root / "latest", ec).string();
  std::vector<std::pair<int64_t, fs::path>> older;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory() || e.is_symlink()) continue;
    const std::string name = e.path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".tmp")) {
      if (name != latest && !fs::exists(e.path() / kCheckpointManifest)) fs::remove_all(e.path());
      continue;
    }
    const int64_t step = step_of(e.path());
    if (step >= 0 && step < current && name != latest && (all || written_under(e.path(), policy)))
      older.push_back({step, e.path()});
  }
  std::sort(older.begin(), older.end());
  const size_t keep_older = size_t(std::max<int64_t>(0, policy.keep_last - 1));
  const size_t drop = older.size() > keep_older ? older.size() - keep_older : 0;
  for (size_t i = 0; i < drop; ++i) {
    if (policy.keep_every > 0 && older[i].first % policy.keep_every == 0) continue;
    fs::remove_all(older[i].second);
  }
}

// Renames the complete `tmp` to `final_dir`. A checkpoint of the same step already there (no
// save replaces one today: a rewind deletes later checkpoints first) is swapped out atomically
// (renameat2's RENAME_EXCHANGE), so that `final_dir` always names a whole checkpoint, and then
// removed.
void commit_directory(const fs::path& tmp, const fs::path& final_dir) {
  if (!fs::exists(final_dir)) {
    fs::rename(tmp, final_dir);
    return;
  }
  CHECK(::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0,
        "cannot replace {}: {}", final_dir.string(), std::strerror(errno));
  fs::remove_all(tmp);
}

}  // namespace

json retention_json(const CheckpointPolicy& p) {
  return {{"keep_last", p.keep_last}, {"keep_every", p.keep_every}};
}

void commit_checkpoint(const fs::path& tmp, const CheckpointPolicy& policy, bool prune_all) {
  // Note [Live readers]: a step-N directory only ever appears whole (a complete temporary
  // renamed) and `latest` is repointed after it, so `latest` never names an unfinished or
  // temporary checkpoint, and a reader that resolves it once reads one checkpoint throughout.
  // A save killed between the two leaves `latest` one behind; latest_checkpoint() then takes
  // the newer complete one.
  const fs::path root = tmp.parent_path(), final_dir = root / tmp.stem();
  commit_directory(tmp, final_dir);
  fsync_path(root);
  point_latest(root, final_dir.filename().string());
  prune(root, step_of(final_dir), policy, prune_all);
}

void finish_interrupted_saves(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  const fs::path latest = latest_checkpoint(run_dir);
  std::vector<fs::path> temporaries;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !e.is_symlink() && name.ends_with(".tmp") &&
        step_of(root / name.substr(0, name.size() - 4)) >= 0 &&
        fs::exists(e.path() / kCheckpointManifest))
      temporaries.push_back(e.path());
  }
  for (const fs::path& tmp : temporaries) {
    const fs::path final_dir = tmp.parent_path() / tmp.stem();
    if (!fs::exists(final_dir)) {
      log::warn("finishing a save that was killed after writing {}: renaming it to {}",
                tmp.string(), final_dir.string());
      fs::rename(tmp, final_dir);
      fsync_path(root);
    }
    if (tmp == latest) point_latest(root, final_dir.filename().string());
    fs::remove_all(tmp);  // a second copy of a finished checkpoint, if still there
  }
}

fs::path latest_checkpoint(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints", link = root / "latest";
  for (int attempt = 1;; ++attempt) {
    std::error_code ec;
    const std::vector<std::pair<int64_t, fs::path>> all = list_checkpoints(run_dir);
    // No link yet: the first save was killed before it made one (or it was deleted by
    // hand); the newest checkpoint is complete all the same.
    if (!fs::is_symlink(link, ec)) return all.empty() ? fs::path() : all.back().second;
    std::string name = fs::read_symlink(link, ec).string();
    // Trainers before format version 2 pointed `latest` at the complete temporary while
    // renaming it: a save killed there left the link naming it, renamed or not.
    const std::string final_name = name.ends_with(".tmp") ? name.substr(0, name.size() - 4) : name;
    if (!fs::is_directory(root / name)) name = final_name;
    const int64_t step = step_of(root / final_name);
    if (!ec && step >= 0 && fs::is_directory(root / name, ec)) {
      // A save killed after renaming its checkpoint but before repointing the link: the
      // newer one is complete (a step-N directory only ever appears whole).
      if (!all.empty() && all.back().first > step) return all.back().second;
      return root / name;
    }
    // A live run may have moved the link on and pruned what it named since it was read.
    CHECK(attempt < 10, "{} points at {}, which is not a checkpoint of this run", link.string(),
          (root / name).string());
  }
}

void repoint_latest(const fs::path& run_dir, const fs::path& checkpoint) {
  point_latest(run_dir / "checkpoints", checkpoint.filename().string());
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  const fs::path root = run_dir / "checkpoints";
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && !e.is_symlink() && step_of(e.path()) >= 0)
      out.push_back({step_of(e.path()), e.path()});
  std::sort(out.begin(), out.end());
  return out;
}

fs::path checkpoint_dir_of(const fs::path& dir) {
  CHECK(fs::is_directory(dir), "{} is not a directory (a checkpoint or a run directory)",
        dir.string());
  if (fs::exists(dir / kCheckpointManifest)) return dir;
  const fs::path latest = latest_checkpoint(dir);
  CHECK(!latest.empty(), "{} is neither a checkpoint nor a run directory with checkpoints",
        dir.string());
  return latest;
}

}  // namespace trainer::app
