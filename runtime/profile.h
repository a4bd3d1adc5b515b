// A per-op wall-clock profile for benchmarks: ops open a PROFILE_SCOPE; when profiling is off
// (the default) a scope costs one branch. Not thread-aware: scopes run on the calling thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/timer.h"

namespace trainer::profile {

extern bool g_enabled;

void set_enabled(bool on);
void reset();
void record(const char* name, double ms);
// (name, total ms, calls), largest first.
struct Entry {
  std::string name;
  double ms = 0;
  long calls = 0;
};
std::vector<Entry> report();

class Scope {
 public:
  explicit Scope(const char* name) : name_(g_enabled ? name : nullptr) {}
  ~Scope() {
    if (name_) record(name_, timer_.ms());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  Timer timer_;
};

}  // namespace trainer::profile

#define PROFILE_CONCAT2(a, b) a##b
#define PROFILE_CONCAT(a, b) PROFILE_CONCAT2(a, b)
#define PROFILE_SCOPE(name) ::trainer::profile::Scope PROFILE_CONCAT(profile_scope_, __LINE__)(name)
