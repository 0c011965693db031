// Where a command's model comes from and how it is loaded: a GGUF file (or
// the embedded default model, generated on first use), the kernels' ISA, the
// threads that run it, and a chat template or day that override the model's.
// Commands fill it from their flags (bin/model_options.h); benchmarks and
// tests can fill it by hand.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/model.h"

namespace tandem {

struct ModelSource {
  std::string model_path;  // empty: the embedded default model
  int threads = 2;
  std::string isa;  // empty: best supported
  std::string chat_template_path;  // empty: the model's own template
  std::string chat_date;           // YYYY-MM-DD for strftime_now; empty: ChatFormat::kDefaultDate
  bool pack_weights = true;        // false: the process never runs the forward pass

  // Applies the ISA, then loads the model; says what went wrong on failure.
  StatusOr<std::unique_ptr<Model>> Load() const;
};

}  // namespace tandem
