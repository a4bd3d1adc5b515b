// The completion record behind a Work handle, shared by the communicator implementations.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

namespace trainer::dist {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty on success
  double busy_s = 0;  // seconds from the operation's start to its completion
  // Set where the operation runs on a device stream: makes the model's stream wait for it
  // (Work::order_stream_after). Called on the thread that issued it.
  std::function<void()> order_stream;

  // Marks the operation finished (with an error message if it failed) and wakes waiters.
  void complete(double busy, std::string err = {}) {
    {
      std::lock_guard lock(mu);
      busy_s = busy;
      error = std::move(err);
      done = true;
    }
    cv.notify_all();
  }
};

}  // namespace trainer::dist
