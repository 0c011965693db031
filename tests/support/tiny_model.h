// Preset model files for end-to-end tests, each written once per test
// process with `tandem mkmodel` and removed when the process exits.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace tandem::testing {

// The path of the tiny model; empty (with a test failure recorded) if mkmodel failed.
const std::string& TinyModelPath();
// Any preset's file (`tiny`, `dsa-tiny`, ...); empty (with a test failure recorded) if mkmodel failed.
const std::string& PresetModelPath(const std::string& preset);

// The models the end-to-end suites run on, and their instances' names:
// INSTANTIATE_TEST_SUITE_P(Models, Suite, kTestModels, ModelInstanceName).
inline const auto kTestModels = ::testing::Values(std::string("tiny"), std::string("dsa-tiny"));
inline std::string ModelInstanceName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "tiny" ? "Llama" : "Deepseek32";
}

}  // namespace tandem::testing
