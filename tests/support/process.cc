#include "support/process.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>

#include "support/paths.h"

namespace tandem::testing {

ProcessResult RunTandem(const std::string& args, int timeout_seconds, const std::string& env) {
  const std::string cmd = env + " timeout " + std::to_string(timeout_seconds) + " " +
                          TandemBinary() + " " + args + " 2>&1";
  ProcessResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string MakeTempDir() {
  char tmpl[] = "/tmp/tandem-test-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  return dir ? dir : "/tmp";
}

}  // namespace tandem::testing
