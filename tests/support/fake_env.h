// A TimeSource (common/clock.h) that moves only when a test says so. It starts
// at the steady clock's present (never at the epoch, which code may use for
// "not set") and is safe to read from any thread while a test advances it.
#pragma once

#include <atomic>
#include <chrono>

#include "common/clock.h"

namespace tandem::testing {

class FakeClock final : public TimeSource {
 public:
  FakeClock() : ticks_(std::chrono::steady_clock::now().time_since_epoch().count()) {}
  time_point now() const override { return time_point(time_point::duration(ticks_.load())); }
  void Advance(std::chrono::steady_clock::duration d) { ticks_.fetch_add(d.count()); }

 private:
  std::atomic<time_point::duration::rep> ticks_;
};

}  // namespace tandem::testing
