// Scratch memory for ops, allocated once (sized when a model is built from the ops' own
// workspace_bytes functions) and handed out in stack order: an op opens a Scope, takes what it
// needs, and the Scope gives it back when the op returns. Nothing is allocated per call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/alignment.h"
#include "runtime/buffer.h"
#include "runtime/error.h"

namespace trainer {

class Workspace {
 public:
  static constexpr size_t kAlignment = kDeviceAlignment;

  Workspace() = default;
  Workspace(size_t bytes, Device device);

  size_t capacity() const { return buffer_.bytes(); }
  // The most that scopes held at once since construction, in bytes.
  size_t peak() const { return peak_; }
  Device device() const { return buffer_.device(); }

  // Bytes `take<T>(count)` uses, alignment included: for workspace_bytes functions.
  template <typename T>
  static size_t bytes_for(int64_t count) {
    return (size_t(count) * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
  }

  class Scope {
   public:
    explicit Scope(Workspace* ws) : ws_(ws), mark_(ws ? ws->top_ : 0) {}
    ~Scope() {
      if (ws_) ws_->top_ = mark_;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

    // `count` elements of scratch, kAlignment-aligned, uninitialised.
    template <typename T>
    T* take(int64_t count) {
      return static_cast<T*>(take_bytes(bytes_for<T>(count)));
    }

   private:
    void* take_bytes(size_t bytes);
    Workspace* ws_;
    size_t mark_;
  };

 private:
  Buffer buffer_;
  size_t top_ = 0, peak_ = 0;
};

}  // namespace trainer
