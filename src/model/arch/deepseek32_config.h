// The hyper-parameters of a DeepSeek sparse-attention model (GGUF
// architecture `deepseek32`, llama.cpp's names): MLA attention over a
// compressed latent, the lightning indexer that picks each query's top-k
// positions, and a mixture of experts after the leading dense layers.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "model/gguf.h"

namespace tandem {

// llama.cpp's expert_gating_func values; only sigmoid (DeepSeek V3's) is implemented and accepted.
enum class ExpertGating { kSoftmax = 1, kSigmoid = 2 };

struct DsaConfig {
  // MLA: queries through a rank-q_lora_rank bottleneck; keys and values
  // through one shared latent of kv_lora_rank dims plus qk_rope_dim RoPE dims
  // per token, which is what the cache holds (kv_lora_rank + qk_rope_dim).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;  // per head, without RoPE
  int64_t qk_rope_dim = 0;  // per head and in the shared key, with RoPE (rope.dimension_count)
  int64_t v_head_dim = 0;
  // The lightning indexer: index_heads query heads of index_dim each, one
  // shared key per token (the index-K cache row), top_k positions per query.
  int64_t index_heads = 0;
  int64_t index_dim = 0;
  int64_t index_top_k = 0;
  // Mixture of experts after the first leading_dense layers.
  int64_t leading_dense = 0;
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t n_shared_experts = 0;
  int64_t expert_ffn_dim = 0;
  int64_t n_expert_groups = 1;       // group-limited routing: experts come from the best
  int64_t n_expert_groups_used = 1;  // n_expert_groups_used of n_expert_groups groups
  double expert_weights_scale = 1.0;
  bool expert_weights_norm = false;
  ExpertGating gating = ExpertGating::kSigmoid;
  double yarn_log_multiplier = 0.0;  // rope.scaling.yarn_log_multiplier (0: none)

  int64_t latent_dim() const { return kv_lora_rank + qk_rope_dim; }  // a kv_latent cache row
  int64_t qk_head_dim() const { return qk_nope_dim + qk_rope_dim; }
};

// Reads and validates the deepseek32.* keys beyond those every architecture
// has (n_layers comes from block_count).
StatusOr<DsaConfig> ReadDsaConfig(const GgufFile& gguf, int64_t n_layers);

}  // namespace tandem
