#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "runtime/stop_strings.h"

namespace tandem {
namespace {

TEST(Sampler, GreedyPicksMaxWithLowestIdOnTies) {
  Sampler s;
  SamplingParams p;
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.Sample(logits, p, {}, 0), 1);
}

TEST(Sampler, DrawIsAFunctionOfSeedAndPosition) {
  Sampler s;
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 9;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(i % 7) * 0.3f;
  for (int64_t pos = 0; pos < 20; ++pos) {
    const int32_t a = s.Sample(logits, p, {}, pos);
    Sampler fresh;
    EXPECT_EQ(a, fresh.Sample(logits, p, {}, pos));
  }
  EXPECT_NE(CounterUniform(1, 5), CounterUniform(2, 5));
  EXPECT_NE(CounterUniform(1, 5), CounterUniform(1, 6));
}

TEST(Sampler, TopKOneIsGreedyAndTopPMinPRestrict) {
  Sampler s;
  std::vector<float> logits = {1.0f, 3.0f, 2.9f, -5.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  for (int64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(s.Sample(logits, p, {}, pos), 1);
  p.top_k = 0;
  p.min_p = 0.5f;  // keeps ids 1 and 2 only (id 0 is e^-2 of the max)
  std::map<int32_t, int> seen;
  for (int64_t pos = 0; pos < 400; ++pos) seen[s.Sample(logits, p, {}, pos)]++;
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
  p.min_p = 0.0f;
  p.top_p = 0.3f;  // the top candidate alone holds more than 30%
  for (int64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(s.Sample(logits, p, {}, pos), 1);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
  Sampler s;
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  int ones = 0;
  for (int64_t pos = 0; pos < 4000; ++pos) ones += s.Sample(logits, p, {}, pos) == 1;
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  Sampler s;
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<float> logits = {1.0f, 1.5f};
  std::vector<int32_t> history = {1, 1, 1};
  EXPECT_EQ(s.Sample(logits, p, history, 3), 0);  // 1.5 / 2 < 1.0
}

TEST(Sampler, InvalidParamsAreRejected) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.temperature = -1.0f;
  EXPECT_FALSE(p.Validate().ok());
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
}

TEST(StopStrings, HoldsBackPossiblePrefixes) {
  StopStringMatcher m({"END", "xy"});
  EXPECT_EQ(m.Push("hello E"), "hello ");
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("x"), "EN");  // "x" could start "xy": held back
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, StopsAtFirstMatch) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Push("abc EN"), "abc ");
  EXPECT_EQ(m.Push("D and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Flush(), "");
}

}  // namespace
}  // namespace tandem
