// The trace recorder; see trace.h.
//
// Note [Trace events]
// Events go to one list under a mutex, each stamped by the steady clock before it is taken,
// so each thread's events are in its own time order (the list interleaves threads). A thread
// gets a small number the first time it records, and keeps its name across recordings. The
// file is balanced when written, whatever happened between start() and stop(): an end whose
// begin came before start() is dropped, and a span still open at stop() ends there, so every
// thread's B and E events nest. Spans of work that crosses threads are Chrome's async events
// ("b"/"e" with an id): a transfer's end is recorded by whichever thread completes it.
#include "runtime/trace.h"

#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::trace {

std::atomic<bool> g_on{false};

namespace {

struct Event {
  const char* name = nullptr;
  const char* category = nullptr;
  const char* arg = nullptr;
  int64_t value = 0;
  int64_t ns = 0;
  uint64_t id = 0;
  int tid = 0;
  char phase = 'B';  // B, E (this thread), b, e (async)
};

std::mutex g_mutex;
std::vector<Event> g_events;                // since start()
std::map<int, std::string> g_thread_names;  // by tid, kept across recordings
int64_t g_stop_ns = 0;
std::atomic<int> g_next_tid{1};
thread_local int t_tid = 0;

int thread_id() {
  if (t_tid == 0) t_tid = g_next_tid.fetch_add(1);
  return t_tid;
}

void record(Event e, int64_t at_ns = -1) {
  if (!on()) return;  // checked again under the lock: stop() may come between
  e.ns = at_ns >= 0 ? at_ns : now_ns();
  e.tid = thread_id();
  std::lock_guard lock(g_mutex);
  if (on()) g_events.push_back(e);
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void start() {
  std::lock_guard lock(g_mutex);
  g_events.clear();
  g_on.store(true, std::memory_order_relaxed);
}

void stop() {
  std::lock_guard lock(g_mutex);
  g_stop_ns = now_ns();
  g_on.store(false, std::memory_order_relaxed);
}

void name_thread(std::string name) {
  const int tid = thread_id();
  std::lock_guard lock(g_mutex);
  g_thread_names[tid] = std::move(name);
}

void begin(const char* name, const char* category, const char* arg, int64_t value, int64_t at_ns) {
  record({name, category, arg, value, 0, 0, 0, 'B'}, at_ns);
}

void end(int64_t at_ns) {
  record({nullptr, nullptr, nullptr, 0, 0, 0, 0, 'E'}, at_ns);
}

void begin_async(const char* name, const char* category, uint64_t id, const char* arg,
                 int64_t value) {
  record({name, category, arg, value, 0, id, 0, 'b'});
}

void end_async(const char* name, const char* category, uint64_t id) {
  record({name, category, nullptr, 0, 0, id, 0, 'e'});
}

int64_t Alignment::offset_at(int64_t t) const {
  if (end_at_ns == begin_at_ns) return begin_offset_ns;
  const double f = double(t - begin_at_ns) / double(end_at_ns - begin_at_ns);
  return begin_offset_ns + int64_t(std::llround(f * double(end_offset_ns - begin_offset_ns)));
}

void write(const std::filesystem::path& path, int pid, const std::string& process_name,
           const Alignment& alignment, int64_t epoch_ns, const std::string& other_data) {
  std::vector<Event> events;
  std::map<int, std::string> names;
  int64_t stop_ns = 0;
  {
    std::lock_guard lock(g_mutex);
    TRAINER_ASSERT(!on(), "a trace written while recording");
    events = g_events;
    names = g_thread_names;
    stop_ns = g_stop_ns;
  }
  std::string out = "{\"traceEvents\":[\n";
  auto add = [&](const std::string& event) {
    out += event;
    out += ",\n";
  };
  auto us = [&](int64_t ns) {
    return fmt::format("{:.3f}", double(ns + alignment.offset_at(ns) - epoch_ns) / 1e3);
  };
  add(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}})",
                  pid, quoted(process_name)));
  add(fmt::format(
      R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
      pid, pid));
  std::map<int, std::vector<const Event*>> open;  // each thread's begun spans
  std::map<uint64_t, const Event*> open_async;    // by id
  for (const Event& e : events) {
    if (!names.contains(e.tid)) names[e.tid] = fmt::format("thread {}", e.tid);
    std::vector<const Event*>& stack = open[e.tid];
    if (e.phase == 'E' && stack.empty()) continue;  // begun before start()
    if (e.phase == 'e' && !open_async.erase(e.id)) continue;
    if (e.phase == 'b') open_async[e.id] = &e;
    const Event& named = e.phase == 'E' ? *stack.back() : e;
    std::string event =
        fmt::format(R"({{"ph":"{}","name":"{}","cat":"{}","ts":{},"pid":{},"tid":{})", e.phase,
                    named.name, named.category, us(e.ns), pid, e.tid);
    // A process's own ids (another rank numbers its transfers alike).
    if (e.phase == 'b' || e.phase == 'e') event += fmt::format(R"(,"id2":{{"local":{}}})", e.id);
    if (e.arg) event += fmt::format(R"(,"args":{{"{}":{}}})", e.arg, e.value);
    add(event + "}");
    if (e.phase == 'B') stack.push_back(&e);
    if (e.phase == 'E') stack.pop_back();
  }
  for (auto& [tid, stack] : open)  // still open at stop(): they end there
    for (size_t i = stack.size(); i-- > 0;)
      add(fmt::format(R"({{"ph":"E","name":"{}","cat":"{}","ts":{},"pid":{},"tid":{}}})",
                      stack[i]->name, stack[i]->category, us(stop_ns), pid, tid));
  for (const auto& [id, b] : open_async)
    add(fmt::format(
        R"({{"ph":"e","name":"{}","cat":"{}","ts":{},"pid":{},"tid":{},"id2":{{"local":{}}}}})",
        b->name, b->category, us(stop_ns), pid, b->tid, id));
  for (const auto& [tid, name] : names)
    add(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})",
                    pid, tid, quoted(name)));
  out.resize(out.size() - 2);  // the last ",\n"
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" + other_data + "}\n";
  write_file_atomic(path, out);
}

}  // namespace trainer::trace
