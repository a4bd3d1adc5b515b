#include "dist/pipeline.h"

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
      slot_micro_(size_t(slots), -1),
      sends_(size_t(slots)),
      grad_in_(2),
      grad_in_busy_(2, false) {
  TRAINER_ASSERT(chunks >= 1 && chunks <= 32 && slots >= 1, "{} chunks, {} slots", chunks, slots);
}

// (micro-batch mod 512, the receiving chunk, direction) in 15 bits: two stages never have two
// transfers of one tag in flight, as at most `slots` micro-batches are.
int Pipeline::tag(bool forward, int micro, int chunk) {
  return ((micro % 512) * 32 + chunk) * 2 + (forward ? 0 : 1);
}

void Pipeline::wait(Work& w, const PipelineAction& a, bool sent, Times& times) {
  if (!w.valid()) return;
  Timer t;
  try {
    w.wait();
  } catch (const Error& e) {
    // A forward's input and a backward's output go back a virtual stage, the others ahead.
    const int v = virtual_stage(a.chunk), back = (v - 1 + stages()) % stages(),
              ahead = (v + 1) % stages();
    const std::string what = a.forward ? "activations" : "gradient";
    THROW_ERROR("pipeline stage {} of {}: {}: {}", stage(), stages(),
                sent ? fmt::format("stage {} does not take micro-batch {}'s {} (chunk {})",
                                   a.forward ? ahead : back, a.micro, what, a.chunk)
                     : fmt::format("the {} of micro-batch {} (chunk {}) waits for stage {}",
                                   a.forward ? "forward" : "backward", a.micro, a.chunk,
                                   a.forward ? back : ahead),
                e.what());
  }
  times.idle_s += t.seconds();
  w = Work();
}

void Pipeline::settle_sends(int slot, Times& times) {
  for (Sent& s : sends_[size_t(slot)]) wait(s.work, s.from, true, times);
  sends_[size_t(slot)].clear();
}

int Pipeline::slot_of(int m, const std::vector<nn::BatchView>& batches) {
  for (size_t s = 0; s < slot_micro_.size(); ++s)
    if (slot_micro_[s] == m) {
      model_.select_slot(int(s));
      return int(s);
    }
  for (size_t s = 0; s < slot_micro_.size(); ++s)
    if (slot_micro_[s] < 0) {
      Times ignored;
      settle_sends(int(s), ignored);
      slot_micro_[s] = m;
      model_.select_slot(int(s));
      model_.stage(batches[size_t(m)]);
      return int(s);
    }
  return -1;
}

// The receive action `a` needs, posted: a forward's input straight into its slot (which it
// then takes; none free: nothing posted yet), a backward's output gradient into a staging
// buffer (its slot's residual gradient may still be read by a send).
Pipeline::Pending Pipeline::post_receive(const PipelineAction& a,
                                         const std::vector<nn::BatchView>& batches) {
  const int v = virtual_stage(a.chunk);
  Pending p;
  if (a.forward) {
    if (v == 0 || slot_of(a.micro, batches) < 0) return p;
    const Tensor in = model_.chunk_input(a.chunk);
    p.work = comm_.recv_async(in.data, in.numel(), in.dtype, (v - 1) % stages(),
                              tag(true, a.micro, a.chunk));
    return p;
  }
  if (v == last_virtual_stage()) return p;
  slot_of(a.micro, batches);  // held since its forward
  const Tensor g = model_.residual_grad();
  const int b = grad_in_busy_[0] ? 1 : 0;
  TRAINER_ASSERT(!grad_in_busy_[size_t(b)], "both gradient staging buffers in use");
  const size_t bytes = size_t(g.numel()) * dtype_size(g.dtype);
  if (grad_in_[size_t(b)].bytes() < bytes) grad_in_[size_t(b)] = Buffer(bytes, g.device);
  grad_in_busy_[size_t(b)] = true;
  p.grad_buffer = b;
  p.work = comm_.recv_async(grad_in_[size_t(b)].data(), g.numel(), g.dtype, (v + 1) % stages(),
                            tag(false, a.micro, a.chunk));
  return p;
}

void Pipeline::run(const PipelineAction& a, Pending& received, float loss_scale, Times& times) {
  const int v = virtual_stage(a.chunk);
  const int slot = [&] {
    for (size_t s = 0; s < slot_micro_.size(); ++s)
      if (slot_micro_[s] == a.micro) return int(s);
    return -1;
  }();
  TRAINER_ASSERT(slot >= 0, "micro-batch {} has no slot at its pass", a.micro);
  model_.select_slot(slot);
  settle_sends(slot, times);
  wait(received.work, a, false, times);
  Timer t;
  if (a.forward) {
    model_.forward_chunk(a.chunk);
    if (v < last_virtual_stage()) {
      const Tensor out = model_.chunk_output(a.chunk);
      sends_[size_t(slot)].push_back(
          {comm_.send_async(out.data, out.numel(), out.dtype, (v + 1) % stages(),
                            tag(true, a.micro, (v + 1) / stages())),
           a});
    }
  } else {
    const Tensor g = model_.residual_grad();
    if (received.grad_buffer >= 0) {
      copy(model_.context(), g.flat(0, g.numel()),
           grad_in_[size_t(received.grad_buffer)].view(g.dtype, g.numel()));
      grad_in_busy_[size_t(received.grad_buffer)] = false;
    }
    model_.backward_chunk(a.chunk, loss_scale);
    if (v > 0)
      sends_[size_t(slot)].push_back(
          {comm_.send_async(g.data, g.numel(), g.dtype, (v - 1) % stages(),
                            tag(false, a.micro, (v - 1) / stages())),
           a});
    if (a.chunk == 0) slot_micro_[size_t(slot)] = -1;  // its last pass here
  }
  times.compute_s += t.seconds();
}

Pipeline::Times Pipeline::train(const std::vector<nn::BatchView>& batches, float loss_scale,
                                const std::function<void()>& before_micro_batch) {
  const std::vector<PipelineAction> actions =
      pipeline_actions(schedule_, stages(), stage(), int(batches.size()), chunks_);
  Times times;
  Pending next;
  bool posted = false;
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& a = actions[i];
    Pending now = posted ? std::move(next) : post_receive(a, batches);
    if (a.forward && a.chunk == 0) {
      before_micro_batch();
      slot_of(a.micro, batches);  // stage 0's first chunk receives nothing
    }
    // Overlap: the next action's receive goes up before this one computes, when it has a slot.
    posted = false;
    if (i + 1 < actions.size()) {
      const PipelineAction& b = actions[i + 1];
      const bool needs_slot = b.forward && virtual_stage(b.chunk) > 0;
      bool free = !needs_slot;
      for (int m : slot_micro_) free |= m < 0 || m == b.micro;
      if (free) {
        next = post_receive(b, batches);
        posted = true;
      }
    }
    run(a, now, loss_scale, times);
  }
  for (size_t s = 0; s < sends_.size(); ++s) settle_sends(int(s), times);
  return times;
}

int64_t Pipeline::forward(const nn::BatchView& batch) {
  Times ignored;
  for (size_t s = 0; s < sends_.size(); ++s) settle_sends(int(s), ignored);
  model_.select_slot(0);
  const int64_t counted = model_.stage(batch);
  for (int c = 0; c < chunks_; ++c) {
    const int v = virtual_stage(c);
    const PipelineAction a{true, 0, c};
    if (v > 0) {
      const Tensor in = model_.chunk_input(c);
      Work w = comm_.recv_async(in.data, in.numel(), in.dtype, (v - 1) % stages(), tag(true, 0, c));
      wait(w, a, false, ignored);
    }
    model_.forward_chunk(c);
    if (v < last_virtual_stage()) {
      const Tensor out = model_.chunk_output(c);
      Work w = comm_.send_async(out.data, out.numel(), out.dtype, (v + 1) % stages(),
                                tag(true, 0, (v + 1) / stages()));
      wait(w, a, true, ignored);
    }
  }
  return counted;
}

}  // namespace trainer::dist
