#include "bin/commands.h"

namespace tandem::cli {
namespace {
int g_exit_code = 0;
}  // namespace

void SetExitCode(int code) { g_exit_code = code; }
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
