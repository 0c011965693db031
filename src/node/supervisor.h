// The restart policy of `serve --disagg` for its child processes, and what it
// tells the outside. A child that exits by itself (a crash, kill -9, an
// out-of-memory kill) is started again on the port it had, after a backoff
// that doubles with each recent restart (100 ms up to 5 s); more than
// `budget` restarts of one child within a minute spend its budget, and the
// launcher stops everything and exits non-zero: a child that cannot stay up
// is not restarted forever.
//
// A child that exits cleanly (code 0: a drain, by SIGTERM or POST
// /admin/drain, finished) is started again too, but a drain is not a crash:
// it spends none of the budget (invariant 10: an operator's drain must not
// add up to a stop of the service). Past kDrainsPerWindow clean exits within
// the window, a clean exit is a failure like any other: a child that keeps
// exiting with 0 by itself is not restarted forever.
//
// The state (each child's restarts, whether it is up, how it last ended) is
// a small JSON file the launcher rewrites on every change; the router, started
// with --supervisor-state, shows it in /health and /metrics, so an operator
// sees a restart while it happens and counts them afterwards.
//
// Thread safety: one thread (the launcher's) calls every method.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <string>

namespace tandem::node {

class Supervisor {
 public:
  static constexpr auto kWindow = std::chrono::seconds(60);
  static constexpr size_t kDrainsPerWindow = 30;

  Supervisor(std::string state_path, int budget);

  void Started(const std::string& child);  // up (at start, or after a restart)
  // The child exited by itself. Returns how long to wait before starting it
  // again, or a negative duration when its restart budget is spent.
  std::chrono::milliseconds Down(const std::string& child, const std::string& how);
  // The child drained and exited cleanly: how long to wait before starting
  // it again (the budget untouched), or, past kDrainsPerWindow, Down's answer.
  std::chrono::milliseconds Drained(const std::string& child);

  const std::string& state_path() const { return path_; }

 private:
  struct ChildState {
    bool up = false;
    int restarts = 0;
    int drains = 0;
    std::string last_exit;
    std::deque<std::chrono::steady_clock::time_point> recent;  // restarts within kWindow
    std::deque<std::chrono::steady_clock::time_point> recent_drains;  // drains within kWindow
  };
  void Write() const;

  std::string path_;
  int budget_;
  std::map<std::string, ChildState> children_;
};

}  // namespace tandem::node
