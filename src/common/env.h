// The time deadlines are kept by. Code whose timers decide what happens —
// liveness, backoff, probation, handoff and page-wait deadlines — reads it
// from a TimeSource it is given instead of the steady clock itself, so tests
// can move time by hand (tests/support/fake_clock.h) and check every deadline
// in milliseconds, without sleeping. Waits on condition variables stay on
// real time: a TimeSource says what time it is, it never blocks.
#pragma once

#include <chrono>

namespace tandem {

class TimeSource {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~TimeSource() = default;
  virtual time_point now() const = 0;
  // std::chrono::steady_clock.
  static const TimeSource& Steady();
};

inline const TimeSource& TimeSource::Steady() {
  struct SteadyTimeSource final : TimeSource {
    time_point now() const override { return std::chrono::steady_clock::now(); }
  };
  static const SteadyTimeSource steady;
  return steady;
}

}  // namespace tandem
