// Run output: metrics.jsonl (one JSON object per line, and the same values as a TensorBoard
// event file under log.tensorboard), a live one-line progress bar on a terminal, and plain
// periodic lines elsewhere (Slurm logs).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "app/progress_mode.h"
#include "app/tensorboard.h"

namespace trainer::app {

class MetricsLog {
 public:
  // Opens `path` for appending, first dropping lines whose "step" exceeds `keep_through` (a
  // resumed run rewrites the steps after its checkpoint; the file is replaced atomically).
  // keep_through < 0 starts afresh. A non-empty `tensorboard` directory gets the same records
  // as events (EventWriter, likewise rewritten).
  MetricsLog(const std::filesystem::path& path, int64_t keep_through,
             const std::filesystem::path& tensorboard = {});
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // Appends one line (and its event) and flushes it; false when a write failed (a full disk),
  // with why(): the file and the reason.
  bool write(const nlohmann::json& record);
  const std::string& why() const { return why_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<EventWriter> events_;
  std::string why_;
};

class Progress {
 public:
  Progress(ProgressMode mode, int64_t total_steps);
  // Redraws the bar (terminal) or prints a plain line when `log_line` is set.
  void update(int64_t step, double loss, double tokens_per_s, double mfu, double eta_s,
              bool log_line);
  // Ends the bar's line so other output starts clean.
  void finish();
  bool live() const { return live_; }

 private:
  bool live_ = false;
  bool drawn_ = false;
  int64_t total_;
};

// Resident set size of this process in MiB: now, and the most it has been (VmHWM).
double resident_mib();
double peak_resident_mib();

}  // namespace trainer::app
