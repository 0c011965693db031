// The soak's schedule and its windows, without a server.
#include "loadgen/soak.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(SoakSchedule, ParsesEveryKindSortedByTime) {
  auto f = ParseFaults(" bit-flips:1@210+30/0.1, kill:0@30+5,abort-storm:64@150 ,wedge:1@90.5+12");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->size(), 4u);
  EXPECT_EQ((*f)[0].kind, Fault::Kind::kKill);
  EXPECT_EQ((*f)[0].target, 0);
  EXPECT_DOUBLE_EQ((*f)[0].for_s, 5);
  EXPECT_EQ((*f)[1].kind, Fault::Kind::kWedge);
  EXPECT_DOUBLE_EQ((*f)[1].at_s, 90.5);
  EXPECT_EQ((*f)[2].kind, Fault::Kind::kAbortStorm);
  EXPECT_EQ((*f)[2].target, 64);
  EXPECT_EQ((*f)[3].kind, Fault::Kind::kBitFlips);
  EXPECT_DOUBLE_EQ((*f)[3].rate, 0.1);
  EXPECT_TRUE(ParseFaults("")->empty());
  auto wedge = ParseFaults("decode-wedge:1@20+15");
  ASSERT_TRUE(wedge.ok()) << wedge.status().ToString();
  EXPECT_EQ((*wedge)[0].kind, Fault::Kind::kDecodeWedge);
  EXPECT_EQ(DescribeFault((*wedge)[0]), "wedge (SIGSTOP) decode server 1 at 20 s for 15 s");
}

TEST(SoakSchedule, RefusesWhatItCannotRunAndSaysWhy) {
  for (const char* bad : {"explode:0@1+1", "kill@3+1", "kill:0", "kill:0@5", "kill:x@5+1", "kill:0@-1+1",
                          "bit-flips:0@5+1/0", "bit-flips:0@5+1/2", "abort-storm:0@5", "wedge:0@5+1junk"}) {
    auto f = ParseFaults(bad);
    EXPECT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SoakSchedule, RepeatsEveryPeriodWhileItStartsInTime) {
  auto f = ParseFaults("kill:0@10+2,abort-storm:8@60");
  ASSERT_TRUE(f.ok());
  const auto all = RepeatFaults(*f, 100, 250);
  std::vector<double> at;
  for (const Fault& x : all) at.push_back(x.at_s);
  EXPECT_EQ(at, (std::vector<double>{10, 60, 110, 160, 210}));
  EXPECT_EQ(RepeatFaults(*f, 0, 250).size(), 2u);
}

RoundRecord Round(double start, double e2e, const char* outcome) {
  RoundRecord r;
  r.start_s = start;
  r.e2e_s = e2e;
  r.outcome = outcome;
  return r;
}

// A round belongs to the first fault window it overlaps (a fault's window
// runs `settle` past its end), else to the quiet period it started in; the
// recovery is the first answer to a round started after the fault ended.
TEST(SoakWindows, SplitsRoundsByFaultWindowAndQuietPeriod) {
  FaultEvent kill;
  kill.fault.kind = Fault::Kind::kKill;
  kill.start_s = 10;
  kill.end_s = 12;
  kill.healthy_s = 12.5;
  FaultEvent storm;
  storm.fault.kind = Fault::Kind::kAbortStorm;
  storm.start_s = 30;
  storm.end_s = 31;
  const std::vector<RoundRecord> rounds = {
      Round(1, 2, kOk),        // quiet before
      Round(9, 2, kError),     // overlaps the kill
      Round(12.5, 1, kOk),     // after the kill ended: its recovery (answered at 13.5)
      Round(16, 1, kOk),       // inside the settle time: still the kill's window
      Round(20, 2, kTimeout),  // the quiet period between
      Round(40, 1, kOk)};      // quiet after the storm's window (31 + 5)
  const auto w = SoakWindows({kill, storm}, rounds, 50, 5);
  ASSERT_EQ(w.size(), 5u);
  EXPECT_FALSE(w[0].fault);
  EXPECT_EQ(w[0].outcomes.at(kOk), 1);
  EXPECT_TRUE(w[1].fault);
  EXPECT_EQ(w[1].outcomes.at(kError), 1);
  EXPECT_EQ(w[1].outcomes.at(kOk), 2);
  EXPECT_DOUBLE_EQ(w[1].to_s, 17);
  EXPECT_DOUBLE_EQ(w[1].recovery_s, 1.5);
  EXPECT_DOUBLE_EQ(w[1].healthy_after_s, 0.5);
  EXPECT_FALSE(w[2].fault);
  EXPECT_EQ(w[2].outcomes.at(kTimeout), 1);
  EXPECT_TRUE(w[3].fault);
  EXPECT_TRUE(w[3].outcomes.empty());
  EXPECT_DOUBLE_EQ(w[3].recovery_s, 40 + 1 - 31);
  EXPECT_DOUBLE_EQ(w[3].healthy_after_s, -1);
  EXPECT_EQ(w[4].outcomes.at(kOk), 1);
}

}  // namespace
}  // namespace tandem
