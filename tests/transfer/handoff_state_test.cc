#include "transfer/handoff_state.h"

#include <gtest/gtest.h>

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using Clock = HandoffStateMachine::Clock;

TEST(HandoffState, DecodeHappyPathAndDeadlines) {
  const auto t0 = Clock::now();
  HandoffDeadlines d{100ms, 200ms, 300ms};
  HandoffStateMachine m(HandoffSide::kDecode, d, t0);
  EXPECT_EQ(m.deadline(), t0 + 100ms);
  EXPECT_FALSE(m.Expired(t0 + 99ms));
  EXPECT_TRUE(m.Expired(t0 + 100ms));
  ASSERT_TRUE(m.Transition(HandoffState::kWaitingForInput, t0 + 10ms).ok());
  EXPECT_EQ(m.deadline(), t0 + 210ms);
  ASSERT_TRUE(m.Transition(HandoffState::kCommitted, t0 + 50ms).ok());
  EXPECT_TRUE(m.terminal());
  EXPECT_FALSE(m.Expired(t0 + 1000s)) << "terminal states have no deadline";
  const auto times = m.TimeInStates(t0 + 60ms);
  EXPECT_NEAR(times[size_t(HandoffState::kBootstrapping)], 0.010, 1e-9);
  EXPECT_NEAR(times[size_t(HandoffState::kWaitingForInput)], 0.040, 1e-9);
}

TEST(HandoffState, IllegalTransitionsChangeNothing) {
  const auto t0 = Clock::now();
  HandoffStateMachine prefill(HandoffSide::kPrefill, {}, t0);
  Status st = prefill.Transition(HandoffState::kWaitingForInput, t0);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("Bootstrapping -> WaitingForInput (prefill side)"), std::string::npos);
  EXPECT_EQ(prefill.state(), HandoffState::kBootstrapping);
  EXPECT_FALSE(prefill.Transition(HandoffState::kCommitted, t0).ok()) << "cannot skip Transferring";
  ASSERT_TRUE(prefill.Transition(HandoffState::kTransferring, t0).ok());
  ASSERT_TRUE(prefill.Transition(HandoffState::kAborted, t0).ok());
  for (auto to : {HandoffState::kCommitted, HandoffState::kFailed, HandoffState::kAborted}) {
    EXPECT_FALSE(prefill.Transition(to, t0).ok()) << "terminal states are final";
  }
  EXPECT_EQ(prefill.state(), HandoffState::kAborted);
}

}  // namespace
}  // namespace tandem::transfer
