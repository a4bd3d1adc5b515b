#include "dist/pipeline.h"

#include <exception>

#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/timer.h"

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
  auto quiet = [](Work& w) {
    try {
      if (w.valid()) w.wait();
    } catch (...) {
    }
  };
  quiet(next_.work);
  for (Transfer& t : sends_) quiet(t.work);
}

// (micro-batch mod 512, the receiving chunk, direction) in 15 bits: two transfers between two
// stages that share a tag are 512 micro-batches apart, and MPI matches equal tags in order.
int Pipeline::tag(bool forward, int micro, int chunk) {
  return ((micro % 512) * 32 + chunk) * 2 + (forward ? 0 : 1);
}

int Pipeline::staging(size_t bytes) {
  for (size_t b = 0; b < staging_.size(); ++b)
    if (!staging_busy_[b] && staging_[b].bytes() >= bytes) return int(b);
  for (size_t b = 0; b < staging_.size(); ++b)
    if (!staging_busy_[b]) {
      staging_[b] = Buffer(bytes, model_.context().device);
      return int(b);
    }
  staging_.emplace_back(bytes, model_.context().device);
  staging_busy_.push_back(false);
  return int(staging_.size()) - 1;
}

void Pipeline::wait(Transfer& t, Times& times) {
  if (!t.work.valid()) return;
  Timer timer;
  try {
    t.work.wait();
  } catch (const CommError& e) {
    // A forward's input and a backward's output go back a virtual stage, the others ahead.
    const PipelineAction& a = t.action;
    const int v = virtual_stage(a.chunk), back = (v - 1 + stages()) % stages(),
              ahead = (v + 1) % stages();
    const std::string what = a.forward ? "activations" : "gradient";
    throw CommError(
        fmt::format("pipeline stage {} of {}: {}: {}", stage(), stages(),
                    t.send ? fmt::format("stage {} does not take micro-batch {}'s {} (chunk {})",
                                         a.forward ? ahead : back, a.micro, what, a.chunk)
                           : fmt::format("the {} of micro-batch {} (chunk {}) waits for stage {}",
                                         a.forward ? "forward" : "backward", a.micro, a.chunk,
                                         a.forward ? back : ahead),
                    e.what()));
  }
  times.idle_s += timer.seconds();
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

Pipeline::Transfer Pipeline::post_receive(const PipelineAction& a, const nn::BatchView& batch) {
  const int v = virtual_stage(a.chunk);
  Transfer t;
  t.action = a;
  if ((a.forward && v == 0) || (!a.forward && v == last_virtual_stage())) return t;
  const int64_t n = model_.residual_numel(batch);  // Note [Pipeline stages]
  t.buffer = staging(size_t(n) * sizeof(float));
  staging_busy_[size_t(t.buffer)] = true;
  const int peer = (a.forward ? v - 1 : v + 1) % stages();
  t.work = comm_.recv_async(staging_[size_t(t.buffer)].data(), n, DType::f32, peer,
                            tag(a.forward, a.micro, a.chunk));
  return t;
}

void Pipeline::send(const PipelineAction& a, const Tensor& data) {
  const int v = virtual_stage(a.chunk), to = a.forward ? v + 1 : v - 1;
  Transfer t;
  t.action = a;
  t.send = true;
  t.buffer = staging(size_t(data.numel()) * sizeof(float));
  staging_busy_[size_t(t.buffer)] = true;
  const Tensor copy_out = staging_[size_t(t.buffer)].view(DType::f32, data.numel());
  copy(model_.context(), copy_out, data.flat(0, data.numel()));
  t.work = comm_.send_async(copy_out.data, data.numel(), DType::f32, to % stages(),
                            tag(a.forward, a.micro, to / stages()));
  sends_.push_back(std::move(t));
}

// One pass: its input copied in from staging, the chunk run, its output sent.
void Pipeline::pass(const PipelineAction& a, Transfer& received,
                    const std::vector<nn::BatchView>& batches, float loss_scale, Times& times) {
  const int slot = slot_of(a.micro, batches);
  wait(received, times);
  if (received.buffer >= 0) {
    const Tensor into = a.forward ? model_.chunk_input(a.chunk) : model_.residual_grad();
    copy(model_.context(), into.flat(0, into.numel()),
         staging_[size_t(received.buffer)].view(DType::f32, into.numel()));
    staging_busy_[size_t(received.buffer)] = false;
  }
  Timer t;
  const int v = virtual_stage(a.chunk);
  if (a.forward) {
    model_.forward_chunk(a.chunk);
    if (v < last_virtual_stage()) send(a, model_.chunk_output(a.chunk));
  } else {
    model_.backward_chunk(a.chunk, loss_scale);
    if (v > 0) send(a, model_.residual_grad());
    if (a.chunk == 0) slot_micro_[size_t(slot)] = -1;  // its last pass here
  }
  times.compute_s += t.seconds();
}

Pipeline::Times Pipeline::run(const std::vector<PipelineAction>& actions,
                              const std::vector<nn::BatchView>& batches, float loss_scale,
                              const std::function<void()>& before_micro_batch) {
  Times times;
  next_ = post_receive(actions.front(), batches[size_t(actions.front().micro)]);
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& a = actions[i];
    Transfer now = std::move(next_);
    next_ = Transfer();
    // Overlap: the next action's receive goes up before this one computes.
    if (i + 1 < actions.size())
      next_ = post_receive(actions[i + 1], batches[size_t(actions[i + 1].micro)]);
    if (a.forward && a.chunk == 0 && before_micro_batch) before_micro_batch();
    pass(a, now, batches, loss_scale, times);
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
