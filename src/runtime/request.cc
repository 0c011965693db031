#include "runtime/request.h"

namespace tandem {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kHandedOff: return "handed off";
    case FinishReason::kError: return "error";
  }
  return "error";
}

bool RequestHandle::Next(StreamEvent* event, std::chrono::milliseconds timeout) {
  UniqueLock lock(mu_);
  if (!cv_.wait_for(lock.native(), timeout, [&]() REQUIRES(mu_) { return !events_.empty(); })) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool RequestHandle::WaitForEvent(std::chrono::milliseconds timeout) {
  UniqueLock lock(mu_);
  return cv_.wait_for(lock.native(), timeout, [&]() REQUIRES(mu_) { return !events_.empty(); });
}

void RequestHandle::Cancel() {
  MutexLock lock(mu_);
  cancelled_ = true;
}

bool RequestHandle::cancelled() const {
  MutexLock lock(mu_);
  return cancelled_;
}

void RequestHandle::Push(StreamEvent event) {
  {
    MutexLock lock(mu_);
    if (finished_) return;
    finished_ = event.kind != StreamEvent::Kind::kText;
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
  MutexLock lock(listener_mu_);
  if (listener_) listener_();
}

void RequestHandle::SetListener(std::function<void()> listener) {
  MutexLock lock(listener_mu_);
  listener_ = std::move(listener);
}

bool RequestHandle::finished() const {
  MutexLock lock(mu_);
  return finished_;
}

}  // namespace tandem
