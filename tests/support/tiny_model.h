// Preset model files for end-to-end tests, each written once per test
// process with `tandem mkmodel` and removed when the process exits.
#pragma once

#include <string>

namespace tandem::testing {

// The path of the tiny model; empty (with a test failure recorded) if mkmodel failed.
const std::string& TinyModelPath();
// Any preset's file (`tiny`, `dsa-tiny`, ...); empty (with a test failure recorded) if mkmodel failed.
const std::string& PresetModelPath(const std::string& preset);

}  // namespace tandem::testing
