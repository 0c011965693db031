#include "cache/layer_gates.h"

#include <chrono>

namespace tandem {

void LayerGates::Open(int layer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_[size_t(layer)]) return;
    open_[size_t(layer)] = 1;
    ++opened_;
  }
  cv_.notify_all();
}

void LayerGates::OpenAll() {
  for (size_t l = 0; l < open_.size(); ++l) Open(int(l));
}

void LayerGates::Wait(int layer) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (open_[size_t(layer)]) return;
  const auto t0 = std::chrono::steady_clock::now();
  cv_.wait(lock, [&] { return open_[size_t(layer)] != 0; });
  waited_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

void LayerGates::WaitAll() const {
  for (size_t l = 0; l < open_.size(); ++l) Wait(int(l));
}

bool LayerGates::AllOpen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return opened_ == int(open_.size());
}

}  // namespace tandem
