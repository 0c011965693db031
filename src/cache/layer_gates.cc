#include "cache/layer_gates.h"
#include "common/env.h"

#include <chrono>

namespace tandem {

void LayerGates::Open(int layer) {
  {
    MutexLock lock(mu_);
    if (open_[size_t(layer)]) return;
    open_[size_t(layer)] = 1;
    ++opened_;
  }
  cv_.notify_all();
}

void LayerGates::OpenAll() {
  for (size_t l = 0; l < n_layers_; ++l) Open(int(l));
}

void LayerGates::Wait(int layer) const {
  UniqueLock lock(mu_);
  if (open_[size_t(layer)]) return;
  const auto t0 = Env::Default().Now();
  cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return open_[size_t(layer)] != 0; });
  waited_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Env::Default().Now() - t0).count();
}

void LayerGates::WaitAll() const {
  for (size_t l = 0; l < n_layers_; ++l) Wait(int(l));
}

bool LayerGates::AllOpen() const {
  MutexLock lock(mu_);
  return opened_ == int(n_layers_);
}

}  // namespace tandem
