// Per-layer "landed" gates of one load into cache pages (prefix/tiers.h
// loads a request's cached prefix from the host tier layer by layer). The
// loader opens gate l only after every registered buffer of layer l has
// landed in every page of the load; the forward pass reads a layer's cached
// rows only through an accessor that waits on that gate (model/forward.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/mutex.h"

namespace tandem {

// One gate per layer of one load. Thread-safe.
class LayerGates {
 public:
  explicit LayerGates(int n_layers) : n_layers_(size_t(n_layers)), open_(size_t(n_layers), 0) {}
  void Open(int layer);
  void OpenAll();
  // Returns once `layer` is open; adds the time it waited to waited_ns.
  void Wait(int layer) const;
  void WaitAll() const;
  bool AllOpen() const;
  int64_t waited_ns() const { return waited_ns_.load(); }

 private:
  mutable Mutex mu_;
  mutable std::condition_variable cv_;
  const size_t n_layers_;
  std::vector<char> open_ GUARDED_BY(mu_);
  int opened_ GUARDED_BY(mu_) = 0;
  mutable std::atomic<int64_t> waited_ns_{0};
};

}  // namespace tandem
