// A timeline of one process for Chrome's trace viewer and Perfetto (log.trace_steps): spans
// that begin and end on one thread, spans of work that crosses threads (a transfer from its
// posting to its completion), and each thread's name. Recording is off unless start() was
// called; a span then costs a clock read and a locked append at each end, and one made while
// recording is off costs one branch. Every thread may record (Note [Trace events]).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

#include "runtime/timer.h"

namespace trainer::trace {

extern std::atomic<bool> g_on;

inline bool on() {
  return g_on.load(std::memory_order_relaxed);
}
// Clears what was recorded and records from now on; stop() ends recording.
void start();
void stop();

// Names the calling thread in the trace (its row in the viewer). Each thread that records
// names itself once; one that does not is "thread N".
void name_thread(std::string name);

// Begins or ends a span on the calling thread, now or at `at_ns` of now_ns()'s clock (a time
// read on this thread after its last event). `name`, `category` and `arg` must outlive the
// trace (string literals); `arg` names `value` in the event's args (none when null).
void begin(const char* name, const char* category, const char* arg = nullptr, int64_t value = 0,
           int64_t at_ns = -1);
void end(int64_t at_ns = -1);
// A span of work that other threads complete (a posted transfer), matched by `id`.
void begin_async(const char* name, const char* category, uint64_t id, const char* arg = nullptr,
                 int64_t value = 0);
void end_async(const char* name, const char* category, uint64_t id);

// A span on the calling thread for the scope's lifetime, recorded when recording was on as it
// began.
class Span {
 public:
  Span(const char* name, const char* category, const char* arg = nullptr, int64_t value = 0)
      : on_(on()) {
    if (on_) begin(name, category, arg, value);
  }
  ~Span() {
    if (on_) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool on_;
};

// A Span that also adds its seconds to `total`: a step's phase timer and its span in a trace
// are one measurement.
class TimedSpan {
 public:
  TimedSpan(const char* name, const char* category, double& total)
      : span_(name, category), total_(total) {}
  ~TimedSpan() { total_ += timer_.seconds(); }
  TimedSpan(const TimedSpan&) = delete;
  TimedSpan& operator=(const TimedSpan&) = delete;

 private:
  Span span_;
  Timer timer_;
  double& total_;
};

// The steady clock in nanoseconds, as events are stamped.
int64_t now_ns();

// Where this process's clock stood against the reference clock (rank 0's) at two times: an
// event at `t` moves by the offset interpolated linearly between them (one offset when they
// coincide).
struct Alignment {
  int64_t begin_at_ns = 0, begin_offset_ns = 0;
  int64_t end_at_ns = 0, end_offset_ns = 0;
  int64_t offset_at(int64_t t) const;
};

// Writes what was recorded as a Chrome trace (JSON object format) to `path`: process `pid`
// named `process_name`, each event's time moved onto the reference clock by `alignment` and
// in microseconds since `epoch_ns` of that clock; `other_data`, a JSON object's text, is the
// file's "otherData". A span still open on some thread ends at the time of stop(). Throws
// naming the file when it cannot be written.
void write(const std::filesystem::path& path, int pid, const std::string& process_name,
           const Alignment& alignment, int64_t epoch_ns, const std::string& other_data);

}  // namespace trainer::trace
