// A per-op time profile for benchmarks: ops open a PROFILE_SCOPE(name, family); when profiling
// is off (the default) a scope costs one branch. On the CPU a scope is timed by the host clock;
// with a CUDA stream set, by events on that stream (the host only queues a GPU's work, so its
// clock says little), resolved when report() is called. Scopes nest: each scope's own time
// excludes the scopes opened inside it, so the own times of all scopes add up to at most the
// time profiled, each moment counted once (Note [Profile families]). Not thread-aware: scopes
// run on the calling thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/timer.h"
#include "runtime/trace.h"

namespace trainer::profile {

extern bool g_enabled;

void set_enabled(bool on);
// Times scopes by events on this CUDA stream (null: by the host clock).
void set_cuda_stream(void* stream);
void reset();

// One scope name's times, summed over its calls.
struct Entry {
  std::string name;
  std::string family;   // the kernel family its own time counts to
  double ms = 0;        // own time: the scope's time less that of the scopes nested in it
  double total_ms = 0;  // with the nested scopes
  long calls = 0;
};
// Every scope name's entry, largest own time first.
std::vector<Entry> report();

// Scope bookkeeping, for the Scope class: open() before the scope's work, close() after it.
void open(const char* name, const char* family);
void close();

// A profiled op; also a span of the trace while one is recorded (runtime/trace.h), named
// by the op and its family.
class Scope {
 public:
  // `name` and `family` must outlive the profile (string literals).
  Scope(const char* name, const char* family) : profiled_(g_enabled), traced_(trace::on()) {
    if (profiled_) open(name, family);
    if (traced_) trace::begin(name, family);
  }
  ~Scope() {
    if (traced_) trace::end();
    if (profiled_) close();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool profiled_, traced_;
};

}  // namespace trainer::profile

#define PROFILE_CONCAT2(a, b) a##b
#define PROFILE_CONCAT(a, b) PROFILE_CONCAT2(a, b)
#define PROFILE_SCOPE(name, family) \
  ::trainer::profile::Scope PROFILE_CONCAT(profile_scope_, __LINE__)(name, family)
