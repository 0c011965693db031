#include "bin/attention_flags.h"

namespace tandem::cli {

void AttentionFlags::AddTo(CLI::App* cmd, const std::string& note) {
  cmd->add_option("--attention", attention, "dense or sparse (lightning indexer + top-k)" + note);
  cmd->add_option("--topk", top_k, "Positions each query attends to under sparse attention" + note)
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--index-k-dtype", index_k_dtype, "Index-K cache dtype: fp8 or bf16" + note);
  cmd->add_option("--kv-dtype", kv_dtype, "K/V cache dtype: f16, bf16 or f32 (default " + kv_dtype + ")" + note);
}

std::vector<std::string> AttentionFlags::Args() const {
  return {"--attention", attention, "--index-k-dtype", index_k_dtype, "--topk", std::to_string(top_k),
          "--kv-dtype", kv_dtype};
}

}  // namespace tandem::cli
