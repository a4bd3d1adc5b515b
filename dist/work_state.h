// The completion record behind a Work handle, shared by the communicator implementations.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

namespace trainer::dist {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty on success
  double busy_s = 0;  // seconds from the operation's start to its completion

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
