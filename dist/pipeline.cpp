#include "dist/pipeline.h"

#include <exception>

#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/timer.h"
#include "runtime/trace.h"

namespace trainer::dist {

Pipeline::Pipeline(Communicator& comm, nn::Model& model, PipelineSchedule schedule, int chunks,
                   int slots)
    : comm_(comm),
      model_(model),
      schedule_(schedule),
      chunks_(chunks),
      slot_micro_(size_t(slots), -1) {
  TRAINER_ASSERT(chunks >= 1 && chunks <= 32 && slots >= 1, "{} chunks, {} slots", chunks, slots);
}

Pipeline::~Pipeline() {
  if (std::uncaught_exceptions() > 0) {
    // Deliberately never freed: the job is ending (MPI aborts it at exit) and a transfer still
    // posted may write into these until then.
    (void)new std::vector<Buffer>(std::move(staging_));
    return;
  }
  for (Transfer& t : sends_) try {
      t.work.wait();
    } catch (...) {
    }
}

// (micro-batch mod 512, the receiving chunk, direction) in 15 bits: two transfers between two
// stages that share a tag are 512 micro-batches apart, and MPI matches equal tags in order.
int Pipeline::tag(const PipelineTransfer& t) {
  return ((t.micro % 512) * 32 + t.chunk) * 2 + (t.forward ? 0 : 1);
}

int Pipeline::staging(size_t bytes) {
  int free = -1;
  for (size_t b = 0; b < staging_.size(); ++b)
    if (!staging_busy_[b]) {
      free = int(b);
      if (staging_[b].bytes() >= bytes) break;
    }
  if (free < 0) {
    staging_.emplace_back();
    staging_busy_.push_back(false);
    free = int(staging_.size()) - 1;
  }
  if (staging_[size_t(free)].bytes() < bytes)
    staging_[size_t(free)] = Buffer(bytes, model_.context().device, MemoryUse::other);
  staging_busy_[size_t(free)] = true;
  return free;
}

void Pipeline::wait(Transfer& t, Times& times) {
  if (!t.work.valid()) return;
  const trace::TimedSpan span("wait for transfer", "pipeline_wait", times.idle_s);
  try {
    t.work.wait();
  } catch (const CommError& e) {
    const PipelineTransfer& w = t.what;
    const std::string what = w.forward ? "activations" : "gradient";
    throw CommError(fmt::format(
        "pipeline stage {} of {}: {}: {}", stage(), stages(),
        w.send ? fmt::format("stage {} does not take micro-batch {}'s {} (its chunk {})", w.peer,
                             w.micro, what, w.chunk)
               : fmt::format("the {} of micro-batch {} (chunk {}) waits for stage {}",
                             w.forward ? "forward" : "backward", w.micro, w.chunk, w.peer),
        e.what()));
  }
  t.work = Work();
}

void Pipeline::reap_sends(bool all, Times& times) {
  std::erase_if(sends_, [&](Transfer& t) {
    if (!all && !t.work.done()) return false;
    wait(t, times);
    staging_busy_[size_t(t.buffer)] = false;
    return true;
  });
}

int Pipeline::slot_of(int m, const std::vector<nn::BatchView>& batches, int64_t* counted) {
  for (size_t s = 0; s < slot_micro_.size(); ++s)
    if (slot_micro_[s] == m) {
      model_.select_slot(int(s));
      return int(s);
    }
  for (size_t s = 0; s < slot_micro_.size(); ++s)
    if (slot_micro_[s] < 0) {
      slot_micro_[s] = m;
      model_.select_slot(int(s));
      const int64_t n = model_.load_batch(batches[size_t(m)]);
      if (counted) *counted = n;
      return int(s);
    }
  TRAINER_ASSERT(false, "micro-batch {} finds all {} slots taken", m, slot_micro_.size());
  return -1;
}

std::vector<Pipeline::Transfer> Pipeline::post(const std::vector<PipelineTransfer>& group,
                                               const std::vector<nn::BatchView>& batches) {
  std::vector<PeerTransfer> posts;
  std::vector<Transfer> received;
  size_t staged = 0;
  for (const PipelineTransfer& w : group) {
    Transfer t;
    if (w.send) {
      TRAINER_ASSERT(staged < staged_.size() && staged_[staged].what == w,
                     "stage {}: the send of micro-batch {} was not staged", stage(), w.micro);
      t = std::move(staged_[staged++]);
    } else {
      const int64_t n = model_.residual_numel(batches[size_t(w.micro)]);  // Note [Pipeline stages]
      t = {Work(), staging(size_t(n) * sizeof(float)), n, w};
    }
    posts.push_back(
        {w.send, staging_[size_t(t.buffer)].data(), t.count, DType::f32, w.peer, tag(w)});
    (w.send ? sends_ : received).push_back(std::move(t));
  }
  TRAINER_ASSERT(staged == staged_.size(), "stage {}: {} staged outputs not sent", stage(),
                 staged_.size() - staged);
  staged_.clear();
  if (posts.empty()) return received;
  std::vector<Work> works = comm_.transfer_async(posts);
  // In `posts`' order: the sends first (now the last of sends_), then the receives.
  const size_t sends = posts.size() - received.size();
  for (size_t i = 0; i < sends; ++i) sends_[sends_.size() - sends + i].work = std::move(works[i]);
  for (size_t i = 0; i < received.size(); ++i) received[i].work = std::move(works[sends + i]);
  return received;
}

// One pass: its input copied in from staging, the chunk run, its output staged.
void Pipeline::pass(const PipelineAction& a, std::vector<Transfer>& received,
                    const std::vector<nn::BatchView>& batches, float loss_scale, Times& times) {
  const int slot = slot_of(a.micro, batches);
  for (Transfer& r : received) {
    if (r.what.forward != a.forward || r.what.micro != a.micro || r.what.chunk != a.chunk) continue;
    wait(r, times);
    const Tensor into = a.forward ? model_.chunk_input(a.chunk) : model_.residual_grad();
    copy(model_.context(), into.flat(0, into.numel()),
         staging_[size_t(r.buffer)].view(DType::f32, into.numel()));
    staging_busy_[size_t(r.buffer)] = false;
  }
  Timer t;
  const int v = virtual_stage(a.chunk);
  const bool sends = a.forward ? v < last_virtual_stage() : v > 0;
  if (a.forward)
    model_.forward_chunk(a.chunk);
  else
    model_.backward_chunk(a.chunk, loss_scale);
  if (sends) {
    const Tensor out = a.forward ? model_.chunk_output(a.chunk) : model_.residual_grad();
    const int to = a.forward ? v + 1 : v - 1;
    Transfer staged{Work(),
                    staging(size_t(out.numel()) * sizeof(float)),
                    out.numel(),
                    {true, to % stages(), a.forward, a.micro, to / stages()}};
    copy(model_.context(), staging_[size_t(staged.buffer)].view(DType::f32, out.numel()),
         out.flat(0, out.numel()));
    staged_.push_back(std::move(staged));
  }
  if (!a.forward && a.chunk == 0) slot_micro_[size_t(slot)] = -1;  // its last pass here
  times.compute_s += t.seconds();
}

Pipeline::Times Pipeline::run(const std::vector<PipelineAction>& actions,
                              const std::vector<nn::BatchView>& batches, float loss_scale,
                              const std::function<void()>& before_micro_batch) {
  Times times;
  for (const PipelineStep& step : pipeline_steps(actions, stages(), stage(), chunks_)) {
    std::vector<Transfer> received = post(step.before, batches);
    for (size_t i = step.first; i < step.end; ++i) {
      const PipelineAction& a = actions[i];
      if (a.forward && a.chunk == 0 && before_micro_batch) before_micro_batch();
      pass(a, received, batches, loss_scale, times);
    }
    reap_sends(false, times);
  }
  reap_sends(true, times);
  return times;
}

Pipeline::Times Pipeline::train(const std::vector<nn::BatchView>& batches, float loss_scale,
                                const std::function<void()>& before_micro_batch) {
  return run(pipeline_actions(schedule_, stages(), stage(), int(batches.size()), chunks_), batches,
             loss_scale, before_micro_batch);
}

int64_t Pipeline::forward(const nn::BatchView& batch) {
  std::vector<PipelineAction> actions;
  for (int c = 0; c < chunks_; ++c) actions.push_back({true, 0, c});
  int64_t counted = 0;
  slot_of(0, {batch}, &counted);
  run(actions, {batch}, 0, {});
  slot_micro_.assign(slot_micro_.size(), -1);  // nothing is held for a backward
  return counted;
}

}  // namespace trainer::dist
