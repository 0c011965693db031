#include "support/tiny_model.h"

#include <gtest/gtest.h>

#include "support/process.h"

namespace tandem::testing {

const std::string& TinyModelPath() {
  static const std::string path = [] {
    const std::string p = MakeTempDir() + "/tiny.gguf";
    auto mk = RunTandem("mkmodel --preset tiny --out " + p);
    EXPECT_EQ(mk.exit_code, 0) << mk.output;
    return mk.exit_code == 0 ? p : std::string();
  }();
  return path;
}

}  // namespace tandem::testing
