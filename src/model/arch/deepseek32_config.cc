#include "model/arch/deepseek32_config.h"

#include <algorithm>

namespace tandem {
namespace {

constexpr const char* kArch = "deepseek32";

Status InRange(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return DataLoss("GGUF metadata '" + key + "' = " + std::to_string(v) + " is out of range [" +
                    std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<DsaConfig> ReadDsaConfig(const GgufFile& g, int64_t n_layers) {
  DsaConfig d;
  const std::string a = kArch;
  constexpr int64_t kMax = int64_t(1) << 20;
  auto get = [&](const std::string& suffix, int64_t* out, int64_t lo, int64_t hi) -> Status {
    TANDEM_ASSIGN_OR_RETURN(uint64_t v, g.GetUint(a + "." + suffix));
    *out = v > uint64_t(kMax) ? kMax + 1 : int64_t(v);
    return InRange(a + "." + suffix, *out, lo, hi);
  };
  auto get_or = [&](const std::string& suffix, int64_t fallback, int64_t* out, int64_t lo,
                    int64_t hi) -> Status {
    const uint64_t v = g.GetUintOr(a + "." + suffix, uint64_t(fallback));
    *out = v > uint64_t(kMax) ? kMax + 1 : int64_t(v);
    return InRange(a + "." + suffix, *out, lo, hi);
  };
  TANDEM_RETURN_IF_ERROR(get("attention.q_lora_rank", &d.q_lora_rank, 1, kMax));
  TANDEM_RETURN_IF_ERROR(get("attention.kv_lora_rank", &d.kv_lora_rank, 1, kMax));
  TANDEM_RETURN_IF_ERROR(get("rope.dimension_count", &d.qk_rope_dim, 2, 1024));
  if (d.qk_rope_dim % 2 != 0)
    return DataLoss("GGUF metadata '" + a + ".rope.dimension_count' must be even");
  int64_t qk_head = 0;
  TANDEM_RETURN_IF_ERROR(get("attention.key_length_mla", &qk_head, d.qk_rope_dim + 1, kMax));
  d.qk_nope_dim = qk_head - d.qk_rope_dim;
  TANDEM_RETURN_IF_ERROR(get("attention.value_length_mla", &d.v_head_dim, 1, kMax));
  // The absorbed form's cache row: llama.cpp writes it as the MQA key/value length.
  int64_t key_length = 0, value_length = 0, kv_heads = 0;
  TANDEM_RETURN_IF_ERROR(get_or("attention.key_length", d.latent_dim(), &key_length, 1, kMax));
  TANDEM_RETURN_IF_ERROR(get_or("attention.value_length", d.kv_lora_rank, &value_length, 1, kMax));
  TANDEM_RETURN_IF_ERROR(get_or("attention.head_count_kv", 1, &kv_heads, 1, kMax));
  if (key_length != d.latent_dim() || value_length != d.kv_lora_rank || kv_heads != 1) {
    return DataLoss("deepseek32 attention must be MLA in its absorbed form: attention.key_length " +
                    std::to_string(key_length) + " (want kv_lora_rank + rope dims = " +
                    std::to_string(d.latent_dim()) + "), attention.value_length " +
                    std::to_string(value_length) + " (want " + std::to_string(d.kv_lora_rank) +
                    "), attention.head_count_kv " + std::to_string(kv_heads) + " (want 1)");
  }
  TANDEM_RETURN_IF_ERROR(get("attention.indexer.head_count", &d.index_heads, 1, 4096));
  TANDEM_RETURN_IF_ERROR(get("attention.indexer.key_length", &d.index_dim, std::max<int64_t>(16, d.qk_rope_dim), 1024));
  if ((d.index_dim & (d.index_dim - 1)) != 0) {
    return DataLoss("GGUF metadata '" + a +
                    ".attention.indexer.key_length' = " + std::to_string(d.index_dim) +
                    " must be a power of two (the indexer's Hadamard rotation)");
  }
  TANDEM_RETURN_IF_ERROR(get("attention.indexer.top_k", &d.index_top_k, 1, kMax));
  d.yarn_log_multiplier = g.GetFloatOr(a + ".rope.scaling.yarn_log_multiplier", 0.0);
  TANDEM_RETURN_IF_ERROR(get_or("leading_dense_block_count", 0, &d.leading_dense, 0, n_layers));
  const bool moe = d.leading_dense < n_layers;
  if (!moe) return d;  // every layer dense: no expert field sizes anything (all stay 0)
  TANDEM_RETURN_IF_ERROR(get("expert_count", &d.n_experts, moe ? 1 : 0, 4096));
  TANDEM_RETURN_IF_ERROR(get("expert_used_count", &d.n_experts_used, moe ? 1 : 0, d.n_experts));
  TANDEM_RETURN_IF_ERROR(get_or("expert_shared_count", 0, &d.n_shared_experts, 0, 64));
  TANDEM_RETURN_IF_ERROR(
      get_or("expert_feed_forward_length", 0, &d.expert_ffn_dim, moe ? 1 : 0, kMax));
  TANDEM_RETURN_IF_ERROR(
      get_or("expert_group_count", 1, &d.n_expert_groups, 1, std::max<int64_t>(1, d.n_experts)));
  TANDEM_RETURN_IF_ERROR(get_or("expert_group_used_count", d.n_expert_groups,
                                &d.n_expert_groups_used, 1, d.n_expert_groups));
  if (d.n_experts % d.n_expert_groups != 0 ||
      d.n_experts_used > d.n_expert_groups_used * (d.n_experts / d.n_expert_groups)) {
    return DataLoss("deepseek32 expert groups do not fit: " + std::to_string(d.n_experts) +
                    " experts in " + std::to_string(d.n_expert_groups) + " groups, " +
                    std::to_string(d.n_experts_used) + " used from " +
                    std::to_string(d.n_expert_groups_used) + " groups");
  }
  d.expert_weights_scale = g.GetFloatOr(a + ".expert_weights_scale", 1.0);
  if (!(d.expert_weights_scale > 0.0 && d.expert_weights_scale < 1e6)) {
    return DataLoss("GGUF metadata '" + a + ".expert_weights_scale' is out of range");
  }
  if (const GgufValue* v = g.Find(a + ".expert_weights_norm")) {
    if (v->type != GgufType::kBool)
      return DataLoss("GGUF metadata '" + a + ".expert_weights_norm' must be a bool");
    d.expert_weights_norm = v->u != 0;
  }
  int64_t gating = 0;
  TANDEM_RETURN_IF_ERROR(
      get_or("expert_gating_func", int64_t(ExpertGating::kSigmoid), &gating, 2, 2));
  d.gating = ExpertGating(gating);
  return d;
}

}  // namespace tandem
