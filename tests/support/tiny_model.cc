#include "support/tiny_model.h"

#include <map>
#include <mutex>

#include <gtest/gtest.h>

#include "support/process.h"

namespace tandem::testing {

const std::string& PresetModelPath(const std::string& preset) {
  static std::mutex mu;
  static std::map<std::string, std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  auto it = paths.find(preset);
  if (it != paths.end()) return it->second;
  const std::string p = MakeTempDir() + "/" + preset + ".gguf";
  auto mk = RunTandem("mkmodel --preset " + preset + " --out " + p);
  EXPECT_EQ(mk.exit_code, 0) << mk.output;
  return paths.emplace(preset, mk.exit_code == 0 ? p : std::string()).first->second;
}

const std::string& TinyModelPath() { return PresetModelPath("tiny"); }

}  // namespace tandem::testing
