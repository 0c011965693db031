#include "model/config.h"

#include "model/arch/architecture.h"

namespace tandem {
namespace {

Status Positive(const std::string& key, int64_t v) {
  if (v <= 0 || v > (int64_t(1) << 31)) {
    return DataLoss("GGUF metadata '" + key + "' = " + std::to_string(v) + " is out of range");
  }
  return Status::Ok();
}

}  // namespace

Status ReadPositive(const GgufFile& g, const std::string& suffix, const ModelConfig& c, int64_t* out) {
  const std::string key = c.architecture + "." + suffix;
  TANDEM_ASSIGN_OR_RETURN(uint64_t v, g.GetUint(key));
  *out = v > uint64_t(1) << 32 ? int64_t(1) << 32 : int64_t(v);
  return Positive(key, *out);
}

const Architecture& ModelConfig::arch() const {
  const Architecture* found = FindArchitecture(architecture);
  TANDEM_CHECK_MSG(found != nullptr, "a model config of an unknown architecture");
  return *found;
}

StatusOr<ModelConfig> ReadModelConfig(const GgufFile& g) {
  ModelConfig c;
  TANDEM_ASSIGN_OR_RETURN(c.architecture, g.GetString("general.architecture"));
  const std::string& a = c.architecture;
  if (FindArchitecture(a) == nullptr) {
    return InvalidArgument("unsupported model architecture '" + a + "' (general.architecture; " +
                           ArchitectureNames() + " are supported)");
  }
  c.name = g.GetStringOr("general.name", a);
  TANDEM_RETURN_IF_ERROR(ReadPositive(g, "embedding_length", c, &c.dim));
  TANDEM_RETURN_IF_ERROR(ReadPositive(g, "block_count", c, &c.n_layers));
  TANDEM_RETURN_IF_ERROR(ReadPositive(g, "feed_forward_length", c, &c.ffn_dim));
  TANDEM_RETURN_IF_ERROR(ReadPositive(g, "attention.head_count", c, &c.n_heads));
  TANDEM_RETURN_IF_ERROR(ReadPositive(g, "context_length", c, &c.context_length));
  c.rms_eps = float(g.GetFloatOr(a + ".attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    return DataLoss("GGUF metadata '" + a + ".attention.layer_norm_rms_epsilon' out of range");
  }
  TANDEM_RETURN_IF_ERROR(c.arch().ReadConfig(g, &c));
  const TensorInfo* embd = g.FindTensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) return DataLoss("tensor 'token_embd.weight' is missing");
  c.vocab_size = int64_t(embd->dims[1]);
  return c;
}

Status ReadRopeConfig(const GgufFile& g, ModelConfig* config) {
  ModelConfig& c = *config;
  const std::string& a = c.architecture;
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
  return Status::Ok();
}

}  // namespace tandem
