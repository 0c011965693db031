#include "runtime/step_budget.h"

#include <gtest/gtest.h>

#include <limits>

namespace tandem {
namespace {

constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

TEST(StepBudget, UnboundedWithoutTargetDecodingSequencesOrAMeasurement) {
  StepBudget off(std::chrono::microseconds(0));
  off.Observe(1000, 0, 1.0);
  EXPECT_EQ(off.PromptTokens(8), kNone);
  StepBudget on(std::chrono::milliseconds(100));
  EXPECT_EQ(on.PromptTokens(8), kNone) << "nothing measured yet";
  on.Observe(1000, 0, 1.0);
  EXPECT_EQ(on.PromptTokens(0), kNone) << "no decoding sequence to hold up";
  EXPECT_EQ(on.PromptTokens(8), 100);
  EXPECT_DOUBLE_EQ(on.prompt_tokens_per_second(), 1000.0);
}

TEST(StepBudget, DecodeStepsTimeIsLeftOutOfThePromptsCost) {
  StepBudget b(std::chrono::milliseconds(100));
  b.Observe(0, 16, 0.020);   // a decode step: 20 ms
  b.Observe(500, 16, 0.520); // 500 prompt tokens beside it: 1 ms each
  EXPECT_DOUBLE_EQ(b.decode_step_seconds(), 0.020);
  EXPECT_NEAR(b.prompt_tokens_per_second(), 1000.0, 1e-6);
  EXPECT_EQ(b.PromptTokens(16), 80) << "(100 ms - 20 ms) / 1 ms";
}

TEST(StepBudget, FollowsACostThatGrowsAndKeepsAMinimum) {
  StepBudget b(std::chrono::milliseconds(100), 64);
  b.Observe(1000, 0, 1.0);
  const int64_t before = b.PromptTokens(4);
  for (int i = 0; i < 20; ++i) b.Observe(100, 0, 0.4);  // 4 ms a token now (a longer context)
  EXPECT_LT(b.PromptTokens(4), before);
  EXPECT_EQ(b.PromptTokens(4), 64) << "25 tokens by the rate, but never under the minimum";
  b.Observe(0, 4, 0.5);  // decode steps alone past the target
  EXPECT_EQ(b.PromptTokens(4), 64);
}

TEST(StepBudget, IgnoresEmptyAndNegativeSteps) {
  StepBudget b(std::chrono::milliseconds(100));
  b.Observe(0, 0, 1.0);
  b.Observe(100, 0, -1.0);
  EXPECT_EQ(b.PromptTokens(4), kNone);
  b.Observe(100, 0, 0.0);  // too fast to measure: a nanosecond a token at least
  EXPECT_GT(b.PromptTokens(4), 1000000);
}

}  // namespace
}  // namespace tandem
