// The logging layer: one line per event, "date time role level message",
// filtered by level.
#include "common/log.h"

#include <gtest/gtest.h>

#include <regex>

namespace tandem {
namespace {

TEST(Log, OneLinePerEventWithRoleAndLevelAndTheLevelFilters) {
  log::Init("unit", log::Level::kWarn);
  EXPECT_FALSE(log::Enabled(log::Level::kInfo));
  EXPECT_TRUE(log::Enabled(log::Level::kWarn));
  ::testing::internal::CaptureStderr();
  TLOG_INFO("hidden %d\n", 1);
  TLOG_WARN("handoff %d failed: %s\n", 7, "peer gone");
  TLOG_ERROR("error: %s", std::string(600, 'x').c_str());  // longer than the formatting buffer
  const std::string out = ::testing::internal::GetCapturedStderr();
  log::Init("tandem", log::Level::kInfo);
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
  const std::regex line(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} unit warn  handoff 7 failed: peer gone\n)");
  EXPECT_TRUE(std::regex_search(out, line)) << out;
  EXPECT_NE(out.find(" unit error error: " + std::string(600, 'x') + "\n"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
}

TEST(Log, LevelsParseByNameAndABadOneSaysWhatIsAllowed) {
  EXPECT_EQ(*log::ParseLevel("debug"), log::Level::kDebug);
  EXPECT_EQ(*log::ParseLevel("off"), log::Level::kOff);
  auto bad = log::ParseLevel("loud");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("debug, info, warn, error or off"), std::string::npos);
}

}  // namespace
}  // namespace tandem
