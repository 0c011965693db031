#include "bin/commands.h"

#include <cstdio>

#include "common/log.h"

namespace tandem::cli {
namespace {
int g_exit_code = 0;
}  // namespace

void SetExitCode(int code) { g_exit_code = code; }

void AddLogLevel(CLI::App* cmd, std::string* level) {
  cmd->add_option("--log-level", *level, "Lowest log level shown: debug, info, warn, error or off");
}

bool StartLog(const std::string& role, const std::string& level) {
  auto l = log::ParseLevel(level);
  if (!l.ok()) {
    std::fprintf(stderr, "error: %s\n", l.status().message().c_str());
    return false;
  }
  log::Init(role, *l);
  return true;
}
int ExitCode() { return g_exit_code; }

void RegisterCommands(CLI::App& app) {
  RegisterGenerate(app);
  RegisterMkmodel(app);
  RegisterBench(app);
  RegisterServe(app);
  RegisterPrefill(app);
  RegisterRouter(app);
  RegisterVerify(app);
}

}  // namespace tandem::cli
