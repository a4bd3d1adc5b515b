// A per-op time profile for benchmarks: ops open a PROFILE_SCOPE; when profiling is off (the
// default) a scope costs one branch. On the CPU a scope is timed by the host clock; with a CUDA
// stream set, by events on that stream (the host only queues a GPU's work, so its clock says
// little), resolved when report() is called. Not thread-aware: scopes run on the calling
// thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/timer.h"

namespace trainer::profile {

extern bool g_enabled;

void set_enabled(bool on);
// Times scopes by events on this CUDA stream (null: by the host clock).
void set_cuda_stream(void* stream);
void reset();
void record(const char* name, double ms);
// (name, total ms, calls), largest first.
struct Entry {
  std::string name;
  double ms = 0;
  long calls = 0;
};
std::vector<Entry> report();

// Event-timed scopes (a CUDA stream set): the start event of a scope, and its end.
void* begin_device_scope();
void end_device_scope(const char* name, void* start);

class Scope {
 public:
  explicit Scope(const char* name)
      : name_(g_enabled ? name : nullptr), start_(name_ ? begin_device_scope() : nullptr) {}
  ~Scope() {
    if (!name_) return;
    if (start_)
      end_device_scope(name_, start_);
    else
      record(name_, timer_.ms());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  void* start_;  // the start event when timed on a CUDA stream
  Timer timer_;
};

}  // namespace trainer::profile

#define PROFILE_CONCAT2(a, b) a##b
#define PROFILE_CONCAT(a, b) PROFILE_CONCAT2(a, b)
#define PROFILE_SCOPE(name) ::trainer::profile::Scope PROFILE_CONCAT(profile_scope_, __LINE__)(name)
