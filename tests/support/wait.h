// Waiting in tests: on a condition, with a deadline, never on a sleep alone.
// WaitUntil checks `done` every `poll` (each check is cheap: a stats call, a
// metrics scrape) until it holds or `timeout` passes, and says which; wrap it
// in EXPECT_TRUE/ASSERT_TRUE so a wait that times out fails the test.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace tandem::testing {

inline bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                      std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(poll);  // the one poll interval of the tests' condition waits
  }
}

}  // namespace tandem::testing
