// The front door's limits on `serve` and `router` (server/http_core.h):
// --max-connections, --max-body-bytes, --header-timeout, --body-timeout,
// --idle-timeout, --write-timeout; re-spelled for serve --disagg's children.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "server/http_core.h"

namespace tandem::cli {

struct HttpFlags {
  HttpLimits limits;
  double header_timeout_s = 10, body_timeout_s = 60, idle_timeout_s = 60, write_timeout_s = 60;

  void AddTo(CLI::App* cmd);
  HttpLimits Limits() const;              // with the timeouts applied
  std::vector<std::string> Args() const;  // for a child process
};

}  // namespace tandem::cli
