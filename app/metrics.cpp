#include "app/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/log.h"

namespace trainer::app {

MetricsLog::MetricsLog(const std::filesystem::path& path, int64_t keep_through,
                       const std::filesystem::path& tensorboard)
    : path_(path) {
  std::string kept;
  if (keep_through >= 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      try {
        auto j = nlohmann::json::parse(line);
        if (j.value("step", int64_t(0)) <= keep_through) kept += line + "\n";
      } catch (const nlohmann::json::exception&) {
        // A line torn by a crash: dropped.
      }
    }
  }
  // Resuming rewrites the file atomically; a fresh run starts it empty.
  if (keep_through >= 0) write_file_atomic(path, kept);
  file_ = std::fopen(path.c_str(), keep_through >= 0 ? "a" : "w");
  CHECK(file_, "cannot write {}: {}", path.string(), std::strerror(errno));
  if (!tensorboard.empty()) events_ = std::make_unique<EventWriter>(tensorboard, keep_through);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

bool MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  errno = 0;
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0) {
    why_ = fmt::format("{} ({})", path_.string(), std::strerror(errno ? errno : EIO));
    std::clearerr(file_);
    return false;
  }
  errno = 0;
  if (events_ && !events_->write(record.value("step", int64_t(0)), record)) {
    why_ = fmt::format("{} ({})", events_->path().string(), std::strerror(errno ? errno : EIO));
    return false;
  }
  return true;
}

Progress::Progress(ProgressMode mode, int64_t total_steps) : total_(total_steps) {
  live_ = mode == ProgressMode::on || (mode == ProgressMode::automatic && ::isatty(STDOUT_FILENO));
}

static std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

void Progress::update(int64_t step, double loss, double tokens_per_s, double mfu, double eta_s,
                      bool log_line) {
  std::string text =
      fmt::format("step {}/{} | loss {:.4f} | {:.0f} tok/s | MFU {:.1f}% | ETA {}", step, total_,
                  loss, tokens_per_s, 100 * mfu, format_duration(eta_s));
  if (live_) {
    const int width = 28;
    int filled = int(double(width) * double(step) / double(std::max<int64_t>(1, total_)));
    std::string bar = std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.');
    std::printf("\r[%s] %s\x1b[K", bar.c_str(), text.c_str());
    std::fflush(stdout);
    drawn_ = true;
  } else if (log_line) {
    log::info("{}", text);
  }
}

void Progress::finish() {
  if (live_ && drawn_) {
    std::printf("\n");
    std::fflush(stdout);
    drawn_ = false;
  }
}

double resident_mib() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return double(resident) * double(::sysconf(_SC_PAGESIZE)) / 1048576.0;
}

}  // namespace trainer::app

namespace trainer::app {

double peak_resident_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

}  // namespace trainer::app
