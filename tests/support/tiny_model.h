// A tiny-preset model file for end-to-end tests, written once per test
// process with `tandem mkmodel` and removed when the process exits.
#pragma once

#include <string>

namespace tandem::testing {

// The path of the tiny model; empty (with a test failure recorded) if mkmodel failed.
const std::string& TinyModelPath();

}  // namespace tandem::testing
