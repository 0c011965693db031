// The engine's size and scheduling flags, declared once for every command
// that runs an engine (serve, prefill) and passed on whole to the children
// of `serve --disagg` (ToArgs), so a prefill engine and a decode server run
// with the sizes the user gave. (A prefill engine's queue is --max-queue;
// serve's --max-waiting is its own.)
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "runtime/engine_options.h"

namespace tandem::cli {

struct EngineFlags {
  std::string prefill_order = "arrival";
  bool no_prefix_cache = false;

  // Binds the flags to *engine (which must outlive the parse); its values
  // before the parse are the command's defaults.
  void AddTo(CLI::App* cmd, EngineOptions* engine);
  // The flags that are not plain fields (the prefill order, the prefix cache) into *engine.
  Status Apply(EngineOptions* engine) const;
  // Every flag with its value, as AddTo spells it.
  std::vector<std::string> ToArgs(const EngineOptions& engine) const;
};

}  // namespace tandem::cli
