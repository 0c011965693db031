// The environment a process runs in, as far as time goes: what time it is —
// steady time for deadlines, timeouts and durations, wall time for the
// timestamps people and other machines read. Every reading of time in src/
// goes through an Env: a component that is given one (EngineOptions::env,
// RouterOptions::env, DiscoveryOptions::env, ...) reads that one, so a test
// can move time by hand (tests/support/fake_env.h) and check a deadline in
// milliseconds without sleeping; the rest read Env::Default(), the real
// clocks. Waits on condition variables (and the transports' waits) stay on
// real time: an Env says what time it is, it never blocks, so a deadline kept
// by an injected Env is handed to such a wait as the time left. A wait that
// polls an injected Env's time (a drain, a health interval) ends only when
// the test moves it.
//
// Thread safety: Now and WallNow may be called from any thread.
#pragma once

#include <chrono>

namespace tandem {

class Env {
 public:
  using Clock = std::chrono::steady_clock;
  using time_point = Clock::time_point;
  using wall_time_point = std::chrono::system_clock::time_point;
  virtual ~Env() = default;
  virtual time_point Now() const = 0;
  virtual wall_time_point WallNow() const = 0;
  // Seconds since the Unix epoch, for timestamps (Prometheus, events, logs).
  double WallSeconds() const { return std::chrono::duration<double>(WallNow().time_since_epoch()).count(); }
  // Seconds of steady time since `t0`.
  double SecondsSince(time_point t0) const { return std::chrono::duration<double>(Now() - t0).count(); }

  // std::chrono::steady_clock and std::chrono::system_clock: the one place src/ reads them.
  static const Env& Default();
};

inline const Env& Env::Default() {
  struct RealEnv final : Env {
    time_point Now() const override { return Clock::now(); }
    wall_time_point WallNow() const override { return std::chrono::system_clock::now(); }
  };
  static const RealEnv real;
  return real;
}

}  // namespace tandem
