#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

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

// The naive matcher the automaton replaced, as the reference: the answer
// ends where the first stop string is complete in the text; of the stops
// complete there, the longest is cut.
std::pair<std::string, bool> ReferenceStop(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t cut = std::string::npos;
    for (const std::string& s : stops) {
      if (!s.empty() && s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
        cut = std::min(cut, end - s.size());
      }
    }
    if (cut != std::string::npos) return {text.substr(0, cut), true};
  }
  return {text, false};
}

TEST(StopStrings, MatchTheReferenceHoweverTheTextIsSplit) {
  std::mt19937 rng(7);
  for (int round = 0; round < 3000; ++round) {
    // A small alphabet, so stops overlap and share prefixes and suffixes.
    auto word = [&](size_t max) {
      std::string w(1 + rng() % max, 'a');
      for (char& c : w) c = char('a' + rng() % 3);
      return w;
    };
    std::vector<std::string> stops;
    for (int i = int(rng() % 4); i >= 0; --i) stops.push_back(word(5));
    const std::string text = word(40);
    StopStringMatcher m(stops);
    std::string emitted;
    for (size_t at = 0; at < text.size() && !m.stopped();) {
      const size_t n = 1 + rng() % 4;
      emitted += m.Push(std::string_view(text).substr(at, n));
      at += n;
    }
    const bool stopped = m.stopped();
    emitted += m.Flush();
    const auto [want, want_stopped] = ReferenceStop(text, stops);
    ASSERT_EQ(stopped, want_stopped) << text;
    ASSERT_EQ(emitted, want) << text << " stops " << ::testing::PrintToString(stops);
  }
}

// Invariant 10: the worst stops a request may send (kMaxStopBytes of long
// near-matches) cost a bounded number of automaton steps per byte of text,
// however long the answer. The naive search this replaced did
// (stops x held text) per token: 64 stops of 128 bytes over a text that
// keeps matching all but their last byte.
TEST(StopStrings, WorkPerByteIsBoundedWhateverTheStops) {
  std::vector<std::string> stops;
  for (int i = 0; i < 64; ++i) stops.push_back(std::string(126, 'a') + char('A' + i % 26) + char('0' + i / 26));
  size_t bytes = 0;
  for (const auto& s : stops) bytes += s.size();
  ASSERT_LE(bytes, kMaxStopBytes);
  StopStringMatcher m(stops);
  std::string text;
  for (int i = 0; i < 20000; ++i) text += (i % 200 == 199) ? 'b' : 'a';
  size_t out = 0;
  for (size_t at = 0; at < text.size(); at += 3) out += m.Push(std::string_view(text).substr(at, 3)).size();
  out += m.Flush().size();
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(out, text.size());
  // Each byte takes one goto step, and failure steps never exceed the goto
  // steps before them (each lowers the depth that a goto step raised by 1).
  EXPECT_LE(m.steps(), 2 * text.size());
}

}  // namespace
}  // namespace tandem
