// Bucketed, overlapped gradient all-reduce; see ddp.h.
#include "dist/ddp.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/trace.h"

namespace trainer::dist {

std::vector<Range> plan_buckets(int64_t total, int64_t bucket_elems,
                                const std::vector<Range>& frozen) {
  CHECK(bucket_elems > 0, "DDP bucket size must be positive, got {} elements", bucket_elems);
  std::vector<Range> sorted = frozen;
  for (const Range& h : sorted)
    CHECK(h.begin >= 0 && h.begin <= h.end && h.end <= total,
          "frozen range [{}, {}) lies outside the {} parameters", h.begin, h.end, total);
  std::sort(sorted.begin(), sorted.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> holes;  // merged, non-empty, then from the top down
  for (const Range& h : sorted) {
    if (h.size() == 0) continue;
    if (!holes.empty() && h.begin <= holes.back().end)
      holes.back().end = std::max(holes.back().end, h.end);
    else
      holes.push_back(h);
  }
  std::reverse(holes.begin(), holes.end());
  // Walk down from the end, cutting around the holes.
  std::vector<Range> buckets;
  int64_t pos = total;
  size_t h = 0;
  while (pos > 0) {
    while (h < holes.size() && holes[h].begin >= pos) ++h;
    if (h < holes.size() && holes[h].end >= pos) {  // pos lies inside (or at the end of) a hole
      pos = std::min(pos, holes[h].begin);
      ++h;
      continue;
    }
    const int64_t floor = h < holes.size() ? holes[h].end : 0;
    const int64_t begin = std::max(floor, pos - bucket_elems);
    buckets.push_back({begin, pos});
    pos = begin;
  }
  return buckets;
}

DDP::DDP(Communicator& comm, nn::Model& model, const DdpConfig& config)
    : comm_(comm),
      model_(model),
      order_(config.order),
      active_(comm.size() > 1 || comm.runs_collectives_alone()) {
  CHECK(config.bucket_mb > 0, "ddp bucket_mb must be positive, got {}", config.bucket_mb);
  const double elem_bytes = double(dtype_size(model.grads().dtype));
  const int64_t elems = std::max<int64_t>(1, int64_t(config.bucket_mb * 1024 * 1024 / elem_bytes));
  buckets_ = plan_buckets(model.layout().total(), elems, config.frozen);
  ready_from_ = model.layout().total();
  model_.attach_grads_ready([this](int64_t begin, int64_t end) { on_ready(begin, end); });
}

DDP::~DDP() {
  model_.attach_grads_ready(nullptr);
  // Never leave the communication thread writing into a buffer that may go away.
  for (Work& w : inflight_) {
    try {
      w.wait();
    } catch (...) {
    }
  }
}

void DDP::on_ready(int64_t begin, int64_t end) {
  if (!sync_ || !active_) return;
  if (end == model_.layout().total()) {
    CHECK(next_bucket_ == 0,
          "DDP: a second synchronised backward in one step; call set_sync(false) on every "
          "accumulation micro-batch but the last");
    ready_from_ = end;
  }
  // Backward reports ranges from the end towards the start; anything else waits for finish().
  if (end != ready_from_) return;
  ready_from_ = begin;
  launch_ready();
}

void DDP::launch_ready() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= ready_from_) {
    const Range& b = buckets_[next_bucket_++];
    const Tensor grads = model_.grads().flat(b.begin, b.size());
    inflight_.push_back(comm_.all_reduce_async(grads.data, b.size(), grads.dtype, order_));
  }
}

void DDP::finish() {
  last_wait_s_ = 0;
  const trace::TimedSpan span("wait for gradient sums", "comm_wait", last_wait_s_);
  last_overlapped_ = int(next_bucket_);
  if (active_) {
    ready_from_ = 0;
    launch_ready();
  }
  double comm_s = 0;
  std::vector<Work> works = std::move(inflight_);
  inflight_.clear();
  next_bucket_ = 0;
  ready_from_ = model_.layout().total();
  for (Work& w : works) {
    w.wait();
    comm_s += w.busy_seconds();
  }
  last_comm_s_ = comm_s;
}

}  // namespace trainer::dist
