// Collects what arrives on one end of a transport connection, for transport
// tests: the messages in order, and whether (and why) it closed. Declare it
// before the transport whose threads write into it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "transfer/transport.h"

namespace tandem::testing {

struct ConnectionInbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<uint8_t>> messages;  // guarded by mu
  bool closed = false;                        // guarded by mu
  Status why;                                 // guarded by mu: the on_close status

  transfer::ConnectionHandlers Handlers() {
    transfer::ConnectionHandlers h;
    h.on_message = [this](transfer::Connection&, std::vector<uint8_t> m) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(std::move(m));
      cv.notify_all();
    };
    h.on_close = [this](transfer::Connection&, const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
      why = s;
      cv.notify_all();
    };
    return h;
  }
  // Bounded waits (20 s): true when it happened.
  bool WaitMessages(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return messages.size() >= n; });
  }
  bool WaitClosed() { return WaitClosedFor(std::chrono::seconds(20)); }
  bool WaitClosedFor(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, [&] { return closed; });
  }
};

}  // namespace tandem::testing
