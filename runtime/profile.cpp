// The per-op profile; see profile.h.
//
// Note [Profile families]
// A scope's own time is its time less the time of the scopes opened inside it (a fallback path
// that runs other ops, the recomputation of a block's forward inside its backward), so no
// moment is counted twice and the families' sums plus the time between scopes make the time
// profiled. On the host the nesting is resolved as scopes close; on a CUDA stream each scope
// remembers its parent, and the events are resolved together in report().
#include "runtime/profile.h"

#include <algorithm>
#include <map>

#include "runtime/cuda/memory.h"
#include "runtime/error.h"

namespace trainer::profile {

bool g_enabled = false;

namespace {

struct Open {
  const char* name;
  const char* family;
  Timer timer;           // host timing
  double nested_ms = 0;  // host timing: the scopes closed inside it
  int slot = -1;         // device timing: its place in pending()
};
// Device-timed scopes until report() resolves their events.
struct DeviceScope {
  const char* name;
  const char* family;
  void *start = nullptr, *end = nullptr;
  int parent = -1;  // the enclosing scope's slot
};

void* g_stream = nullptr;
std::vector<Open>& open_scopes() {
  static std::vector<Open> s;
  return s;
}
std::vector<DeviceScope>& pending() {
  static std::vector<DeviceScope> p;
  return p;
}
std::map<std::string, Entry>& entries() {
  static std::map<std::string, Entry> e;
  return e;
}

void record(const char* name, const char* family, double own_ms, double total_ms) {
  Entry& e = entries()[name];
  e.name = name;
  e.family = family;
  e.ms += own_ms;
  e.total_ms += total_ms;
  ++e.calls;
}

void resolve_pending() {
  std::vector<DeviceScope>& p = pending();
  if (p.empty()) return;
  TRAINER_ASSERT(open_scopes().empty(), "profile resolved with {} scopes open",
                 open_scopes().size());
  cuda_synchronize(g_stream);
  std::vector<double> total(p.size()), nested(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) {
    total[i] = cuda_event_elapsed_ms(p[i].start, p[i].end);
    if (p[i].parent >= 0) nested[size_t(p[i].parent)] += total[i];
  }
  for (size_t i = 0; i < p.size(); ++i) {
    record(p[i].name, p[i].family, total[i] - nested[i], total[i]);
    cuda_event_destroy(p[i].start);
    cuda_event_destroy(p[i].end);
  }
  p.clear();
}

// The innermost open scope's entry, or null (work outside every scope is not attributed).
Entry* innermost() {
  return open_scopes().empty() ? nullptr : &entries()[open_scopes().back().name];
}

}  // namespace

double Entry::flops() const {
  double f = 0;
  for (const auto& [shape, calls] : products) f += shape.flops() * double(calls);
  return f;
}

void add_product(const GemmShape& shape) {
  if (Entry* e = innermost()) ++e->products[shape];
}

void add_bytes(double bytes) {
  if (Entry* e = innermost()) e->bytes += bytes;
}

void set_enabled(bool on) {
  g_enabled = on;
}

void set_cuda_stream(void* stream) {
  // A scope must be timed by one clock from its start to its end, and its parent by the same.
  TRAINER_ASSERT(open_scopes().empty(), "the profile's stream changed with {} scopes open",
                 open_scopes().size());
  resolve_pending();
  g_stream = stream;
}

void reset() {
  resolve_pending();
  entries().clear();
}

void open(const char* name, const char* family) {
  Open o{name, family, Timer(), 0, -1};
  if (g_stream) {
    DeviceScope d{name, family};
    d.parent = open_scopes().empty() ? -1 : open_scopes().back().slot;
    d.start = cuda_timing_event_create();
    cuda_event_record(d.start, g_stream);
    o.slot = int(pending().size());
    pending().push_back(d);
  }
  open_scopes().push_back(o);
}

void close() {
  std::vector<Open>& s = open_scopes();
  TRAINER_ASSERT(!s.empty(), "profile scope closed twice");
  const Open o = s.back();
  s.pop_back();
  if (o.slot >= 0) {
    DeviceScope& d = pending()[size_t(o.slot)];
    d.end = cuda_timing_event_create();
    cuda_event_record(d.end, g_stream);
    return;
  }
  const double ms = o.timer.ms();
  if (!s.empty()) s.back().nested_ms += ms;
  record(o.name, o.family, ms - o.nested_ms, ms);
}

std::vector<Entry> report() {
  resolve_pending();
  std::vector<Entry> out;
  for (const auto& [name, e] : entries()) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace trainer::profile
