#include "support/tiny_model.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "support/process.h"

namespace tandem::testing {
namespace {

std::string* g_dir = nullptr;

void RemoveDir() {
  if (g_dir) std::filesystem::remove_all(*g_dir);
}

}  // namespace

const std::string& TinyModelPath() {
  static const std::string path = [] {
    g_dir = new std::string(MakeTempDir());
    std::atexit(&RemoveDir);
    const std::string p = *g_dir + "/tiny.gguf";
    auto mk = RunTandem("mkmodel --preset tiny --out " + p);
    EXPECT_EQ(mk.exit_code, 0) << mk.output;
    return mk.exit_code == 0 ? p : std::string();
  }();
  return path;
}

}  // namespace tandem::testing
