// --api-key, --api-key-file, --admin-key-file and --cors-origin on `serve` and `router`
// (server/access.h), and their re-spelling for serve --disagg's children.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "server/access.h"

namespace tandem::cli {

struct AccessFlags {
  std::string api_key, api_key_file, admin_key_file, cors_origin;
  CLI::Option* api_key_option = nullptr;  // given at all (an empty value is refused, never "no key")
  CLI::Option* api_key_file_option = nullptr;
  CLI::Option* admin_key_file_option = nullptr;

  void AddTo(CLI::App* cmd);
  StatusOr<AccessPolicy> Load() const;
  std::vector<std::string> Args() const;  // for a child process
};

}  // namespace tandem::cli
