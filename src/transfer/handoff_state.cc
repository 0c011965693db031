#include "transfer/handoff_state.h"

namespace tandem::transfer {

const char* HandoffStateName(HandoffState s) {
  switch (s) {
    case HandoffState::kBootstrapping: return "Bootstrapping";
    case HandoffState::kWaitingForInput: return "WaitingForInput";
    case HandoffState::kTransferring: return "Transferring";
    case HandoffState::kCommitted: return "Committed";
    case HandoffState::kFailed: return "Failed";
    case HandoffState::kAborted: return "Aborted";
  }
  return "?";
}

bool IsTerminal(HandoffState s) {
  return s == HandoffState::kCommitted || s == HandoffState::kFailed || s == HandoffState::kAborted;
}

HandoffStateMachine::HandoffStateMachine(HandoffSide side, HandoffDeadlines deadlines,
                                         Clock::time_point now)
    : side_(side), deadlines_(deadlines), entered_(now), deadline_(now + deadlines.bootstrapping) {}

Status HandoffStateMachine::Transition(HandoffState to, Clock::time_point now) {
  const HandoffState from = state_;
  const HandoffState middle =
      side_ == HandoffSide::kDecode ? HandoffState::kWaitingForInput : HandoffState::kTransferring;
  bool legal = false;
  if (!IsTerminal(from)) {
    legal = to == HandoffState::kFailed || to == HandoffState::kAborted ||
            (from == HandoffState::kBootstrapping && to == middle) ||
            (from == middle && to == HandoffState::kCommitted);
  }
  if (!legal) {
    return FailedPrecondition(std::string("illegal handoff transition ") + HandoffStateName(from) +
                              " -> " + HandoffStateName(to) +
                              (side_ == HandoffSide::kDecode ? " (decode side)" : " (prefill side)"));
  }
  seconds_[size_t(from)] += std::chrono::duration<double>(now - entered_).count();
  state_ = to;
  entered_ = now;
  if (to == HandoffState::kWaitingForInput) deadline_ = now + deadlines_.waiting_for_input;
  if (to == HandoffState::kTransferring) deadline_ = now + deadlines_.transferring;
  return Status::Ok();
}

std::array<double, 6> HandoffStateMachine::TimeInStates(Clock::time_point now) const {
  auto out = seconds_;
  out[size_t(state_)] += std::chrono::duration<double>(now - entered_).count();
  return out;
}

}  // namespace tandem::transfer
