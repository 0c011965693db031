// Options every model-running command shares (--model, --threads, --isa,
// --chat-template) and
// the one place they are turned into a loaded model.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/model.h"

namespace tandem::cli {

struct ModelOptions {
  std::string model_path;  // empty: the embedded default model
  int threads = 2;
  std::string isa;  // empty: best supported
  std::string chat_template_path;  // empty: the model's own template
  std::string chat_date;           // YYYY-MM-DD for strftime_now; empty: ChatFormat::kDefaultDate
  bool pack_weights = true;        // false: the process never runs the forward pass

  void AddTo(CLI::App* cmd);
  // Applies --isa, then loads the model; prints what went wrong on failure.
  StatusOr<std::unique_ptr<Model>> Load() const;
};

}  // namespace tandem::cli
