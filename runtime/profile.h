// A per-op time profile for benchmarks: ops open a PROFILE_SCOPE(name, family); when profiling
// is off (the default) a scope costs one branch. On the CPU a scope is timed by the host clock;
// with a CUDA stream set, by events on that stream (the host only queues a GPU's work, so its
// clock says little), resolved when report() is called. Scopes nest: each scope's own time
// excludes the scopes opened inside it, so the own times of all scopes add up to at most the
// time profiled, each moment counted once (Note [Profile families]). Not thread-aware: scopes
// run on the calling thread. Beside its time a scope gathers the work the ops inside it report
// (Note [Profile work]), which bench sets against the machine's limits.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/timer.h"
#include "runtime/trace.h"

namespace trainer::profile {

extern bool g_enabled;

void set_enabled(bool on);
// Times scopes by events on this CUDA stream (null: by the host clock).
void set_cuda_stream(void* stream);
void reset();

// A matrix product's shape: C (m, n) = op(A) (m, k) op(B) (k, n), of `ab` operands into a C of
// `c`.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType ab = DType::f32, c = DType::f32;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
  bool operator<(const GemmShape& o) const {
    return std::tie(m, n, k, trans_a, trans_b, ab, c) <
           std::tie(o.m, o.n, o.k, o.trans_a, o.trans_b, o.ab, o.c);
  }
};

// One scope name's times, summed over its calls, and the work reported inside it (not inside
// the scopes nested in it).
struct Entry {
  std::string name;
  std::string family;   // the kernel family its own time counts to
  double ms = 0;        // own time: the scope's time less that of the scopes nested in it
  double total_ms = 0;  // with the nested scopes
  long calls = 0;
  double bytes = 0;                    // memory traffic of its elementwise ops
  std::map<GemmShape, long> products;  // its matrix products, with their counts
  double flops() const;
};
// Every scope name's entry, largest own time first.
std::vector<Entry> report();

// Note [Profile work]
// Ops report what they do to the innermost open scope while profiling is on: a matrix product
// its shape (matmul), an elementwise op its memory traffic (the op dispatch: every tensor it
// reads once, every tensor it writes twice, since a CPU reads a line for ownership before it
// writes it and an update in place reads it anyway). A bandwidth counted the same way and the
// GEMM rate at each shape are then the limits each op's own time is measured against. A GPU
// writes without reading first, so there the count overstates an op's writes as much as the
// bandwidth pass's: a ratio, not a byte count, is what compares.
void add_product(const GemmShape& shape);
void add_bytes(double bytes);

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
