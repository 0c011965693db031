// The handoff state machine: the one place where a handoff's states, legal
// transitions and deadlines are defined. Both sides use it; metrics read the
// time spent in each state from it.
//
//   decode:  Bootstrapping (waiting for pages) -> WaitingForInput (destination
//            sent) -> Committed (commit verified, pages published)
//   prefill: Bootstrapping (destination received) -> Transferring (computing
//            and writing layers) -> Committed (flushed, commit sent)
//   any non-terminal state -> Failed (error, deadline) or Aborted (asked to stop)
//
// Every non-terminal state has a deadline; Expired() says when it has passed.
#pragma once

#include <array>
#include <chrono>
#include <string>

#include "common/status.h"

namespace tandem::transfer {

enum class HandoffState { kBootstrapping, kWaitingForInput, kTransferring, kCommitted, kFailed, kAborted };
enum class HandoffSide { kPrefill, kDecode };

const char* HandoffStateName(HandoffState s);
bool IsTerminal(HandoffState s);

struct HandoffDeadlines {
  std::chrono::milliseconds bootstrapping{30'000};   // includes waiting for free pages
  std::chrono::milliseconds waiting_for_input{60'000};
  std::chrono::milliseconds transferring{60'000};
};

class HandoffStateMachine {
 public:
  using Clock = std::chrono::steady_clock;
  HandoffStateMachine(HandoffSide side, HandoffDeadlines deadlines, Clock::time_point now);

  HandoffState state() const { return state_; }
  bool terminal() const { return IsTerminal(state_); }
  Clock::time_point deadline() const { return deadline_; }
  bool Expired(Clock::time_point now) const { return !terminal() && now >= deadline_; }

  // Moves to `to` if the transition is legal for this side; otherwise
  // FailedPrecondition naming both states, and nothing changes.
  Status Transition(HandoffState to, Clock::time_point now);

  // Seconds spent in each state so far (the current one up to `now`).
  std::array<double, 6> TimeInStates(Clock::time_point now) const;

 private:
  const HandoffSide side_;
  const HandoffDeadlines deadlines_;
  HandoffState state_ = HandoffState::kBootstrapping;
  Clock::time_point entered_, deadline_;
  std::array<double, 6> seconds_{};
};

}  // namespace tandem::transfer
