// Connections a listener refused before they authenticated (transfer/transport.h,
// FirstMessageGate): counted by reason, and logged the first time a reason
// is seen and then at every power of two, so a flood costs a few log lines.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tandem::transfer {

class RefusalCounter {
 public:
  explicit RefusalCounter(std::string transport) : transport_(std::move(transport)) {}

  // One refusal; `why` says what the peer did (its numbers are dropped to
  // make the reason's kind, so a flood of one kind counts as one).
  void Count(const std::string& why);
  // Refusals so far, by kind (at most kMaxKinds, then "other").
  std::map<std::string, int64_t> counts() const;

 static constexpr size_t kMaxKinds = 64;

 private:
  const std::string transport_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> counts_;  // guarded by mu_
};

}  // namespace tandem::transfer
