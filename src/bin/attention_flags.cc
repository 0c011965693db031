#include "bin/attention_flags.h"

namespace tandem::cli {

// Engines that exchange caches must agree on all four (the handshake's layout
// refuses a mismatch); verify takes them from the transcript when it says.
void AttentionFlags::AddTo(CLI::App* cmd) {
  const std::string agree = " (the same on every engine; verify: when the transcript does not say)";
  cmd->add_option("--attention", attention, "dense or sparse (lightning indexer + top-k)" + agree);
  cmd->add_option("--topk", top_k, "Positions each query attends to under sparse attention" + agree)
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--index-k-dtype", index_k_dtype, "Index-K cache dtype: fp8 or bf16" + agree);
  cmd->add_option("--kv-dtype", kv_dtype, "K/V cache dtype: f16 (default), bf16 or f32" + agree);
}

std::vector<std::string> AttentionFlags::Args() const {
  return {"--attention", attention, "--index-k-dtype", index_k_dtype, "--topk", std::to_string(top_k),
          "--kv-dtype", kv_dtype};
}

}  // namespace tandem::cli
