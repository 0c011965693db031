// Runs the tandem binary as a child process with a time limit and captures
// its output (stdout and stderr together).
#pragma once

#include <string>

namespace tandem::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string output;
};

// `args` is appended to the binary path and run by /bin/sh under `timeout`.
ProcessResult RunTandem(const std::string& args, int timeout_seconds = 120,
                        const std::string& env = "");
// A shell command under `timeout`, stdout and stderr captured together.
ProcessResult RunShell(const std::string& command, int timeout_seconds = 120);

// A fresh directory under /tmp, removed with its contents when the test
// process exits (kept when TANDEM_KEEP_TEST_DIRS is set, for debugging).
std::string MakeTempDir();

// serve --disagg --debug-fault-control's listener, read off its log: the
// port (0 when the log does not say it) and the key it takes.
struct FaultControl {
  int port = 0;
  std::string key_file, key;
};
FaultControl FindFaultControl(const std::string& launcher_log);

}  // namespace tandem::testing
