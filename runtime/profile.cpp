#include "runtime/profile.h"

#include <algorithm>
#include <map>

#include "runtime/cuda_memory.h"

namespace trainer::profile {

bool g_enabled = false;

namespace {
std::map<std::string, Entry>& entries() {
  static std::map<std::string, Entry> e;
  return e;
}

// Scopes timed on a CUDA stream: their names and events, until report() reads them.
struct DeviceScope {
  const char* name;
  void *start, *end;
};
void* g_stream = nullptr;
std::vector<DeviceScope>& pending() {
  static std::vector<DeviceScope> p;
  return p;
}

void resolve_pending() {
  if (pending().empty()) return;
  cuda_synchronize(g_stream);
  for (const DeviceScope& d : pending()) {
    record(d.name, cuda_event_elapsed_ms(d.start, d.end));
    cuda_event_destroy(d.start);
    cuda_event_destroy(d.end);
  }
  pending().clear();
}
}  // namespace

void set_enabled(bool on) {
  g_enabled = on;
}

void set_cuda_stream(void* stream) {
  resolve_pending();
  g_stream = stream;
}

void reset() {
  resolve_pending();
  entries().clear();
}

void* begin_device_scope() {
  if (!g_stream) return nullptr;
  void* start = cuda_timing_event_create();
  cuda_event_record(start, g_stream);
  return start;
}

void end_device_scope(const char* name, void* start) {
  void* end = cuda_timing_event_create();
  cuda_event_record(end, g_stream);
  pending().push_back({name, start, end});
}

void record(const char* name, double ms) {
  Entry& e = entries()[name];
  e.name = name;
  e.ms += ms;
  ++e.calls;
}

std::vector<Entry> report() {
  resolve_pending();
  std::vector<Entry> out;
  for (const auto& [name, e] : entries()) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace trainer::profile
