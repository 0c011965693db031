// An Env (common/env.h) whose time moves only when a test says so. Steady
// time starts at the real clock's present (never at the epoch, which code may
// use for "not set"), wall time at the real wall clock's, and both move
// together. Safe to read from any thread while a test advances it.
#pragma once

#include <atomic>
#include <chrono>

#include "common/env.h"

namespace tandem::testing {

class FakeEnv final : public Env {
 public:
  FakeEnv()
      : steady_(Clock::now().time_since_epoch().count()),
        wall_(std::chrono::duration_cast<Clock::duration>(std::chrono::system_clock::now().time_since_epoch()).count()) {}
  time_point Now() const override { return time_point(time_point::duration(steady_.load())); }
  wall_time_point WallNow() const override {
    return wall_time_point(std::chrono::duration_cast<wall_time_point::duration>(Clock::duration(wall_.load())));
  }
  void Advance(Clock::duration d) {
    steady_.fetch_add(d.count());
    wall_.fetch_add(d.count());
  }

 private:
  std::atomic<Clock::duration::rep> steady_, wall_;
};

}  // namespace tandem::testing
