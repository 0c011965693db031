#include "model/config.h"

#include <cmath>

namespace tandem {
namespace {

Status Positive(const std::string& key, int64_t v) {
  if (v <= 0 || v > (int64_t(1) << 31)) {
    return DataLoss("GGUF metadata '" + key + "' = " + std::to_string(v) + " is out of range");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ReadModelConfig(const GgufFile& g) {
  ModelConfig c;
  TANDEM_ASSIGN_OR_RETURN(c.architecture, g.GetString("general.architecture"));
  const std::string& a = c.architecture;
  if (a != "llama" && a != "mistral" && a != "qwen2" && a != "deepseek32") {
    return InvalidArgument("unsupported model architecture '" + a +
                           "' (general.architecture; llama, mistral, qwen2 and deepseek32 are supported)");
  }
  c.name = g.GetStringOr("general.name", a);
  auto get = [&](const std::string& suffix, int64_t* out) -> Status {
    TANDEM_ASSIGN_OR_RETURN(uint64_t v, g.GetUint(a + "." + suffix));
    *out = int64_t(v);
    return Positive(a + "." + suffix, *out);
  };
  TANDEM_RETURN_IF_ERROR(get("embedding_length", &c.dim));
  TANDEM_RETURN_IF_ERROR(get("block_count", &c.n_layers));
  TANDEM_RETURN_IF_ERROR(get("feed_forward_length", &c.ffn_dim));
  TANDEM_RETURN_IF_ERROR(get("attention.head_count", &c.n_heads));
  TANDEM_RETURN_IF_ERROR(get("context_length", &c.context_length));
  if (c.is_dsa()) {
    // MLA: one shared latent (the "KV head"); the query/key head is the
    // nope dims plus the RoPE dims, which are the only ones rotated.
    TANDEM_ASSIGN_OR_RETURN(c.dsa, ReadDsaConfig(g, c.n_layers));
    if (c.dsa.leading_dense == 0) c.ffn_dim = 0;  // no dense layer: no tensor backs it, nothing may be sized by it
    c.n_kv_heads = 1;
    c.head_dim = c.dsa.qk_head_dim();
  } else {
    c.n_kv_heads = int64_t(g.GetUintOr(a + ".attention.head_count_kv", uint64_t(c.n_heads)));
    TANDEM_RETURN_IF_ERROR(Positive(a + ".attention.head_count_kv", c.n_kv_heads));
    if (c.n_heads % c.n_kv_heads != 0) {
      return DataLoss("attention.head_count " + std::to_string(c.n_heads) +
                      " is not a multiple of attention.head_count_kv " + std::to_string(c.n_kv_heads));
    }
    c.head_dim = int64_t(g.GetUintOr(a + ".attention.key_length", uint64_t(c.dim / c.n_heads)));
    TANDEM_RETURN_IF_ERROR(Positive(a + ".attention.key_length", c.head_dim));
    if (c.head_dim % 2 != 0) return DataLoss("attention head dimension must be even for RoPE");
  }
  c.rms_eps = float(g.GetFloatOr(a + ".attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    return DataLoss("GGUF metadata '" + a + ".attention.layer_norm_rms_epsilon' out of range");
  }
  c.rope_neox = a == "qwen2";  // deepseek32's MLA RoPE pairs (2i, 2i+1) too; its indexer's is NeoX
  c.rope_dims = int64_t(g.GetUintOr(a + ".rope.dimension_count", uint64_t(c.head_dim)));
  if (c.rope_dims <= 0 || c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    return DataLoss("GGUF metadata '" + a + ".rope.dimension_count' is out of range");
  }
  c.rope_theta = g.GetFloatOr(a + ".rope.freq_base", 10000.0);
  if (!(c.rope_theta > 1.0)) return DataLoss("GGUF metadata '" + a + ".rope.freq_base' <= 1");
  const std::string scaling = g.GetStringOr(a + ".rope.scaling.type", "none");
  c.rope_factor = g.GetFloatOr(a + ".rope.scaling.factor", 1.0);
  if (scaling == "none" || c.rope_factor == 1.0) {
    c.rope_scaling = RopeScaling::kNone;
  } else if (scaling == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
  } else if (scaling == "yarn") {
    c.rope_scaling = RopeScaling::kYarn;
  } else {
    return InvalidArgument("unsupported rope scaling type '" + scaling + "'");
  }
  if (c.rope_scaling != RopeScaling::kNone && !(c.rope_factor > 0.0 && c.rope_factor < 1e6)) {
    return DataLoss("GGUF metadata '" + a + ".rope.scaling.factor' is out of range");
  }
  c.rope_original_context = int64_t(
      g.GetUintOr(a + ".rope.scaling.original_context_length", uint64_t(c.context_length)));
  c.yarn_beta_fast = g.GetFloatOr(a + ".rope.scaling.yarn_beta_fast", 32.0);
  c.yarn_beta_slow = g.GetFloatOr(a + ".rope.scaling.yarn_beta_slow", 1.0);
  if (c.is_dsa() && c.rope_scaling != RopeScaling::kNone) {
    // DeepSeek's YaRN as V3 and V3.2 configure it (mscale = mscale_all_dim = 1, which the GGUF
    // converter writes as yarn_log_multiplier 0.1): RoPE at magnitude 1 and attention scaled by
    // (1 + 0.1 ln factor)^2. Other mscale pairs are defined differently by different readers.
    if (c.rope_scaling != RopeScaling::kYarn || std::fabs(c.dsa.yarn_log_multiplier - 0.1) > 1e-6) {
      return InvalidArgument("deepseek32 RoPE scaling must be YaRN with rope.scaling.yarn_log_multiplier 0.1 "
                             "(mscale_all_dim 1, as DeepSeek V3 and V3.2), not '" + scaling + "' with " +
                             std::to_string(c.dsa.yarn_log_multiplier));
    }
  }
  const TensorInfo* embd = g.FindTensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) return DataLoss("tensor 'token_embd.weight' is missing");
  c.vocab_size = int64_t(embd->dims[1]);
  return c;
}

}  // namespace tandem
