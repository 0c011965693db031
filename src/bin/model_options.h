// The flags every model-running command shares (--model, --threads, --isa,
// --chat-template, --chat-date), filling a ModelSource (model/model_source.h).
#pragma once

#include <CLI/CLI.hpp>

#include "model/model_source.h"

namespace tandem::cli {

struct ModelOptions : ModelSource {
  void AddTo(CLI::App* cmd) { AddTo(cmd, this); }
  static void AddTo(CLI::App* cmd, ModelSource* source);
};

}  // namespace tandem::cli
