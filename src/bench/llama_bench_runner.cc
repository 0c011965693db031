#include "bench/llama_bench_runner.h"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sstream>
#include <unistd.h>

#include <sys/wait.h>

#include "common/env.h"

namespace tandem::bench {
namespace {

constexpr size_t kMaxOutput = size_t(1) << 20;

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

// Runs argv with stdout captured (stderr to /dev/null), killed past the deadline.
StatusOr<std::string> Capture(const std::vector<std::string>& argv, std::chrono::seconds deadline) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status(StatusCode::kInternal, "pipe failed");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Status(StatusCode::kInternal, "fork failed");
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group: a deadline kills whatever it started too
    dup2(fds[1], 1);
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  const auto end = Env::Default().Now() + deadline;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Env::Default().Now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, int(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < kMaxOutput) out.append(buf, size_t(n));
  }
  close(fds[0]);
  // Its output ended: it has until the same deadline to exit.
  int status = 0;
  for (;;) {
    if (!timed_out && Env::Default().Now() >= end) timed_out = true;
    if (timed_out) {  // the group, and the child itself should it have left it
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    const pid_t done = waitpid(pid, &status, timed_out ? 0 : WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return Status(StatusCode::kInternal, "waitpid failed");
    if (done == 0) usleep(10000);
  }
  if (timed_out) return Status(StatusCode::kDeadlineExceeded, argv[0] + " ran past its deadline");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status(StatusCode::kInternal, argv[0] + " failed (exit status " +
                                             std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  }
  return out;
}

}  // namespace

StatusOr<double> ParseLlamaBenchCsv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, header, last;
  while (std::getline(in, line)) {
    if (line.find("avg_ts") != std::string::npos) {
      header = line;
    } else if (!header.empty() && !line.empty()) {
      last = line;
    }
  }
  if (header.empty() || last.empty()) return Status(StatusCode::kInvalidArgument, "no llama-bench CSV with avg_ts in its output");
  const auto names = SplitCsvLine(header), values = SplitCsvLine(last);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] != "avg_ts") continue;
    if (i >= values.size()) break;
    char* end = nullptr;
    const double v = std::strtod(values[i].c_str(), &end);
    if (end == values[i].c_str() || !(v > 0)) break;
    return v;
  }
  return Status(StatusCode::kInvalidArgument, "llama-bench's CSV row has no positive avg_ts");
}

StatusOr<LlamaBenchPoint> RunLlamaBench(const std::string& binary, const std::string& model, int64_t context,
                                        int decode_tokens, int threads, std::chrono::seconds deadline) {
  const std::vector<std::string> common = {binary, "-m", model, "-t", std::to_string(threads), "-r", "1", "-o", "csv"};
  auto run = [&](std::vector<std::string> extra) -> StatusOr<double> {
    std::vector<std::string> argv = common;
    argv.insert(argv.end(), extra.begin(), extra.end());
    TANDEM_ASSIGN_OR_RETURN(const std::string out, Capture(argv, deadline));
    return ParseLlamaBenchCsv(out);
  };
  LlamaBenchPoint p;
  TANDEM_ASSIGN_OR_RETURN(p.prefill_tps, run({"-p", std::to_string(context), "-n", "0"}));
  TANDEM_ASSIGN_OR_RETURN(p.decode_tps,
                          run({"-p", "0", "-n", std::to_string(decode_tokens), "-d", std::to_string(context)}));
  return p;
}

}  // namespace tandem::bench
