#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>

namespace tandem::log {
namespace {

spdlog::level::level_enum ToSpd(Level l) {
  switch (l) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger>& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("tandem", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e tandem %v");
    l->flush_on(spdlog::level::debug);  // every line reaches the log at once (tests and crashes read it)
    return l;
  }();
  return logger;
}

}  // namespace

StatusOr<Level> ParseLevel(const std::string& name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  return InvalidArgument("--log-level must be debug, info, warn, error or off, not '" + name + "'");
}

void Init(const std::string& role, Level level) {
  auto& l = Logger();
  l->set_pattern("%Y-%m-%d %H:%M:%S.%e " + role + " %v");
  l->set_level(ToSpd(level));
}

void SetLevel(Level level) { Logger()->set_level(ToSpd(level)); }

bool Enabled(Level level) { return Logger()->should_log(ToSpd(level)); }

void Write(Level level, const char* format, ...) {
  auto& l = Logger();
  if (!l->should_log(ToSpd(level))) return;
  char small[512];
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(small, sizeof(small), format, args);
  va_end(args);
  std::string text;
  if (n >= 0 && size_t(n) < sizeof(small)) {
    text.assign(small, size_t(n));
  } else if (n >= 0) {
    text.resize(size_t(n) + 1);
    std::vsnprintf(text.data(), text.size(), format, copy);
    text.resize(size_t(n));
  }
  va_end(copy);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  static const char* const kNames[] = {"debug", "info ", "warn ", "error", "off  "};
  l->log(ToSpd(level), "{} {}", kNames[int(level)], text);
}

}  // namespace tandem::log
