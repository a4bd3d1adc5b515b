#include "dist/comm_engine.h"

#include <fmt/format.h>

#include "runtime/error.h"
#include "runtime/trace.h"

namespace trainer::dist {

CommEngine::CommEngine(int world, std::function<void()> thread_start) : world_(world) {
  thread_ = std::thread([this, start = std::move(thread_start)] {
    trace::name_thread("communication");
    if (start) start();
    loop();
  });
}

CommEngine::~CommEngine() {
  stop();
}

void CommEngine::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Work CommEngine::submit(CommJob job) {
  auto state = std::make_shared<WorkState>();
  {
    std::lock_guard lock(mu_);
    const int64_t seq = next_seq_++;
    std::string name = fmt::format("{} #{}{}", job.kind, seq, job.detail);
    if (broken_ || failing_) {
      state->complete(0, fmt::format("{} not run: the communicator failed earlier: {}", name,
                                     broken_ ? broken_message_ : "(being torn down)"));
      return Work(state);
    }
    if (job.issue) {
      job.issue();
      job.issue = nullptr;  // it may refer to the caller's frame
    }
    state->order_stream = std::move(job.order_stream);
    queue_.push_back({std::move(job), std::move(name), seq, state});
  }
  cv_.notify_one();
  return Work(state);
}

bool CommEngine::broken() const {
  std::lock_guard lock(mu_);
  return broken_;
}

void CommEngine::fail(const std::string& message, const std::function<void()>& cleanup) {
  failing_ = true;  // no issue starts from here on
  // An issue in progress holds the lock: wait for it, unless it is stuck (in NCCL's enqueue
  // behind a hung collective, say), which only the cleanup can unblock.
  std::unique_lock lock(mu_, std::defer_lock);
  for (int ms = 0; ms < kIssueGraceMs && !lock.try_lock(); ++ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cleanup();
  if (!lock.owns_lock()) lock.lock();
  if (!broken_) {
    broken_ = true;
    broken_message_ = message;
  }
}

int CommEngine::add_account() {
  std::lock_guard lock(mu_);
  accounts_.emplace_back();
  return int(accounts_.size()) - 1;
}

int CommEngine::add_idle(std::function<void()> task) {
  int id = 0;
  {
    std::lock_guard lock(idle_mu_);
    idle_.emplace_back(next_idle_, std::move(task));
    has_idle_ = true;
    id = next_idle_++;
  }
  cv_.notify_all();  // a thread waiting without a period starts one
  return id;
}

void CommEngine::remove_idle(int id) {
  std::lock_guard lock(idle_mu_);
  std::erase_if(idle_, [&](const auto& t) { return t.first == id; });
  has_idle_ = !idle_.empty();
}

void CommEngine::run_idle() {
  TRAINER_ASSERT(std::this_thread::get_id() == thread_.get_id(),
                 "idle tasks run on the engine's thread");
  std::lock_guard lock(idle_mu_);
  for (const auto& [id, task] : idle_) task();
}

CommStats CommEngine::stats(int account) const {
  std::lock_guard lock(mu_);
  return accounts_.at(size_t(account));
}

void CommEngine::loop() {
  for (;;) {
    Queued q;
    bool failed_earlier = false;
    std::string earlier;
    {
      std::unique_lock lock(mu_);
      while (!stop_ && queue_.empty()) {
        if (!has_idle_) {
          cv_.wait(lock);
        } else if (!cv_.wait_for(
                       lock, hurried_ > 0 ? kHurriedPeriod : std::chrono::microseconds(kIdlePeriod),
                       [&] { return stop_ || !queue_.empty(); })) {
          lock.unlock();
          run_idle();
          lock.lock();
        }
      }
      if (queue_.empty()) return;  // stopped, and nothing left
      q = std::move(queue_.front());
      queue_.pop_front();
      failed_earlier = broken_;
      earlier = broken_message_;
    }
    if (failed_earlier) {
      q.state->complete(
          0, fmt::format("{} not run: the communicator failed earlier: {}", q.name, earlier));
      continue;
    }
    try {
      double busy = 0;
      {
        const trace::Span span(q.job.kind, "collective", "bytes", int64_t(q.job.bytes));
        busy = q.job.run(q.name, q.seq);
      }
      {
        std::lock_guard lock(mu_);
        accounts_.at(size_t(q.job.account))
            .add(q.job.kind, q.job.bytes, q.job.world > 0 ? q.job.world : world_, busy);
      }
      q.state->complete(busy);
    } catch (const CommFailure& f) {
      {
        std::lock_guard lock(mu_);
        broken_ = true;
        broken_message_ = f.message;
      }
      q.state->complete(0, f.message);
    }
  }
}

}  // namespace trainer::dist
