#include "bin/http_flags.h"

namespace tandem::cli {
namespace {

std::chrono::milliseconds Ms(double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); }

}  // namespace

void HttpFlags::AddTo(CLI::App* cmd) {
  cmd->add_option("--max-body-bytes", limits.max_body_bytes, "Largest request body, any transfer encoding (413 past it)")
      ->check(CLI::Range(size_t(1), size_t(1) << 34));
  cmd->add_option("--max-connections", limits.max_connections,
                  "Open client connections; past it only /health, /metrics and /v1/models are served, others get 503")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--header-timeout", header_timeout_s, "Seconds for a request's header to arrive (408 past it)")
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_option("--body-timeout", body_timeout_s, "Seconds for a request's body to arrive (408 past it)")
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_option("--idle-timeout", idle_timeout_s, "Seconds a kept-alive connection may wait for its next request")
      ->check(CLI::Range(0.01, 86400.0));
  cmd->add_option("--write-timeout", write_timeout_s,
                  "Seconds an answer may make no progress (a client not reading) before its connection is closed")
      ->check(CLI::Range(0.01, 3600.0));
}

HttpLimits HttpFlags::Limits() const {
  HttpLimits l = limits;
  l.header_timeout = Ms(header_timeout_s);
  l.body_timeout = Ms(body_timeout_s);
  l.idle_timeout = Ms(idle_timeout_s);
  l.write_timeout = Ms(write_timeout_s);
  return l;
}

std::vector<std::string> HttpFlags::Args() const {
  return {"--max-body-bytes", std::to_string(limits.max_body_bytes), "--max-connections",
          std::to_string(limits.max_connections), "--header-timeout", std::to_string(header_timeout_s),
          "--body-timeout", std::to_string(body_timeout_s), "--idle-timeout", std::to_string(idle_timeout_s),
          "--write-timeout", std::to_string(write_timeout_s)};
}

}  // namespace tandem::cli
