// Where tests find the shared test models and the built tandem binary.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace tandem::testing {

// ../shared/models beside the source tree; empty if absent.
inline std::string SharedModelsDir() {
  std::filesystem::path p = std::filesystem::path(TANDEM_SOURCE_DIR) / ".." / "shared" / "models";
  return std::filesystem::exists(p / "stories260K.gguf") ? p.string() : std::string();
}

inline std::string Stories260kPath() {
  const std::string dir = SharedModelsDir();
  return dir.empty() ? dir : dir + "/stories260K.gguf";
}

inline std::string TandemBinary() { return TANDEM_BINARY; }

}  // namespace tandem::testing

// Skips the test loudly when ../shared/models is absent (e.g. on a fresh user clone).
#define TANDEM_REQUIRE_SHARED_MODEL(path_var)                                          \
  const std::string path_var = ::tandem::testing::Stories260kPath();                  \
  if (path_var.empty()) {                                                              \
    GTEST_SKIP() << "SKIPPED LOUDLY: ../shared/models/stories260K.gguf is absent; "    \
                    "this test needs the real tiny model beside the project";          \
  }
