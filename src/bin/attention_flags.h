// The attention and cache-dtype flags, declared once for every command that
// builds an engine (serve, prefill, generate, verify), and re-spelled for the
// child processes of `serve --disagg` (both sides must match).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "model/cache_spec.h"

namespace tandem::cli {

struct AttentionFlags {
  std::string attention = "dense", index_k_dtype = "fp8", kv_dtype = "f16";
  int64_t top_k = 2048;

  void AddTo(CLI::App* cmd);
  StatusOr<AttentionOptions> Resolve() const {
    return ParseAttentionOptions(attention, index_k_dtype, top_k, kv_dtype);
  }
  std::vector<std::string> Args() const;
};

}  // namespace tandem::cli
