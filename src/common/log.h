// The one logging layer (spdlog): every process logs one line per event to
// stderr as
//   2026-12-01 12:00:00.123 prefill warn  handoff 7 failed: ...
// with the engine role the process runs as and a level that --log-level
// filters (debug, info, warn, error, off). Messages name the request or
// handoff they are about. printf-style formats, checked by the compiler.
#pragma once

#include <string>

#include "common/status.h"

namespace tandem::log {

enum class Level { kDebug, kInfo, kWarn, kError, kOff };
StatusOr<Level> ParseLevel(const std::string& name);

// Once, early in main (before other threads log): the role written on every
// line ("serve", "prefill", "decode", "router", ...) and the lowest level shown.
void Init(const std::string& role, Level level = Level::kInfo);
void SetLevel(Level level);
bool Enabled(Level level);

void Write(Level level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tandem::log

#define TLOG_DEBUG(...) ::tandem::log::Write(::tandem::log::Level::kDebug, __VA_ARGS__)
#define TLOG_INFO(...) ::tandem::log::Write(::tandem::log::Level::kInfo, __VA_ARGS__)
#define TLOG_WARN(...) ::tandem::log::Write(::tandem::log::Level::kWarn, __VA_ARGS__)
#define TLOG_ERROR(...) ::tandem::log::Write(::tandem::log::Level::kError, __VA_ARGS__)
