#include "runtime/workspace.h"

#include <algorithm>

namespace trainer {

Workspace::Workspace(size_t bytes, Device device) : buffer_(bytes, device, MemoryUse::workspace) {}

void* Workspace::Scope::take_bytes(size_t bytes) {
  TRAINER_ASSERT(ws_ != nullptr, "an op needs {} bytes of scratch but has no workspace", bytes);
  TRAINER_ASSERT(ws_->top_ + bytes <= ws_->capacity(),
                 "workspace of {} bytes is too small: {} in use, {} more asked for",
                 ws_->capacity(), ws_->top_, bytes);
  void* p = static_cast<char*>(ws_->buffer_.data()) + ws_->top_;
  ws_->top_ += bytes;
  ws_->peak_ = std::max(ws_->peak_, ws_->top_);
  return p;
}

}  // namespace trainer
