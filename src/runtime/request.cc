#include "runtime/request.h"

namespace tandem {

bool RequestHandle::Next(StreamEvent* event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestHandle::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

bool RequestHandle::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void RequestHandle::Push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = event.kind != StreamEvent::Kind::kText;
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

bool RequestHandle::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

}  // namespace tandem
