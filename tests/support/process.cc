#include "support/process.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "support/paths.h"

namespace tandem::testing {

namespace {

ProcessResult Capture(const std::string& cmd) {
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

}  // namespace

ProcessResult RunTandem(const std::string& args, int timeout_seconds, const std::string& env) {
  return Capture(env + " timeout " + std::to_string(timeout_seconds) + " " + TandemBinary() + " " + args + " 2>&1");
}

ProcessResult RunShell(const std::string& command, int timeout_seconds) {
  std::string quoted;  // the command as one single-quoted word for sh -c
  for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return Capture("timeout " + std::to_string(timeout_seconds) + " /bin/sh -c '" + quoted + "' 2>&1");
}

namespace {

// Every directory MakeTempDir made in this process, removed at exit.
struct TempDirs {
  std::mutex mu;
  std::vector<std::string> paths;
  ~TempDirs() {
    const char* keep = std::getenv("TANDEM_KEEP_TEST_DIRS");
    if (keep != nullptr && *keep != '\0') return;
    std::error_code ec;
    for (const std::string& p : paths) std::filesystem::remove_all(p, ec);
  }
};

TempDirs& Dirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

std::string MakeTempDir() {
  TempDirs& dirs = Dirs();  // constructed before the first directory, so destroyed after its users
  char tmpl[] = "/tmp/tandem-test-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir == nullptr) return "/tmp";
  std::lock_guard<std::mutex> lock(dirs.mu);
  dirs.paths.push_back(dir);
  return dir;
}

FaultControl FindFaultControl(const std::string& log) {
  FaultControl c;
  const std::string marker = "fault control at http://127.0.0.1:", key_marker = " (key in ";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return c;
  c.port = std::atoi(log.c_str() + at + marker.size());
  const size_t k = log.find(key_marker, at);
  const size_t end = k == std::string::npos ? k : log.find(')', k);
  if (end == std::string::npos) return c;
  c.key_file = log.substr(k + key_marker.size(), end - k - key_marker.size());
  std::ifstream(c.key_file) >> c.key;
  return c;
}

}  // namespace tandem::testing
