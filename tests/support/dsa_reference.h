// An independent float64 implementation of the deepseek32 forward pass,
// written plainly for tests from the model's definition (llama.cpp's
// deepseek32 graph is the public reference for the GGUF layout): MLA in its
// absorbed form over the latent, the lightning indexer with its top-k, and
// the sigmoid-gated, group-limited mixture of experts with shared experts.
// Whole sequences at once, no cache; RoPE plain or YaRN.
#pragma once

#include <cstdint>
#include <vector>

#include "model/gguf.h"

namespace tandem::testing {

class DsaReference {
 public:
  // Throws std::runtime_error on what it does not implement (RoPE scaling
  // other than YaRN).
  explicit DsaReference(const GgufFile& gguf);
  int64_t vocab() const { return vocab_; }
  // Logits for every position, row-major [tokens.size() x vocab]. Each
  // query attends to the top_k positions its indexer scores highest (all of
  // them when top_k >= its context); top_k <= 0: the file's indexer.top_k.
  // bf16_index_keys: score positions with the index keys rounded to bf16 as
  // a bf16 index-K cache holds them (so a selection can be compared).
  std::vector<double> Forward(const std::vector<int32_t>& tokens, int64_t top_k = 0,
                              bool bf16_index_keys = false) const;
  // The positions each query of the last Forward call attended to, per layer.
  const std::vector<std::vector<std::vector<int64_t>>>& selections() const { return selections_; }
  // How many (layer, query) selections of the last Forward call had a tie
  // across the top-k boundary (the k-th and the next score equal: with few
  // indexer heads, ReLU makes many scores exactly 0). This reference keeps
  // the earlier position; other implementations may not.
  int64_t boundary_ties() const { return boundary_ties_; }

 private:
  std::vector<double> T(const std::string& name) const;
  const GgufFile& g_;
  int64_t dim_, layers_, heads_, vocab_, q_lora_, kv_lora_, nope_, rope_, v_head_;
  int64_t index_heads_, index_dim_, index_top_k_, dense_, experts_, used_, shared_, expert_ffn_,
      groups_, groups_used_;
  double eps_, theta_, scale_, attn_mscale_;
  std::vector<double> freq_;  // RoPE angle per position, per pair
  bool norm_weights_;
  mutable std::vector<std::vector<std::vector<int64_t>>> selections_;
  mutable int64_t boundary_ties_ = 0;
};

}  // namespace tandem::testing
