#include "model/arch/deepseek32.h"

#include <cmath>

#include "model/weights.h"

namespace tandem {
namespace {

Status LoadLayer(WeightLoader& ld, const ModelConfig& c, int64_t l, DsaLayerWeights* L, int64_t* expert_bytes) {
  const DsaConfig& d = c.dsa;
  const std::string p = "blk." + std::to_string(l) + ".";
  TANDEM_ASSIGN_OR_RETURN(L->attn_norm, ld.Vector(p + "attn_norm.weight", c.dim));
  TANDEM_ASSIGN_OR_RETURN(L->ffn_norm, ld.Vector(p + "ffn_norm.weight", c.dim));
  TANDEM_ASSIGN_OR_RETURN(L->q_a_norm, ld.Vector(p + "attn_q_a_norm.weight", d.q_lora_rank));
  TANDEM_ASSIGN_OR_RETURN(L->kv_a_norm, ld.Vector(p + "attn_kv_a_norm.weight", d.kv_lora_rank));
  TANDEM_ASSIGN_OR_RETURN(L->wq_a, ld.Matrix(p + "attn_q_a.weight", c.dim, d.q_lora_rank));
  TANDEM_ASSIGN_OR_RETURN(L->wq_b, ld.Matrix(p + "attn_q_b.weight", d.q_lora_rank, c.n_heads * d.qk_head_dim()));
  TANDEM_ASSIGN_OR_RETURN(L->wkv_a, ld.Matrix(p + "attn_kv_a_mqa.weight", c.dim, d.latent_dim()));
  TANDEM_ASSIGN_OR_RETURN(L->wk_b, ld.Slices(p + "attn_k_b.weight", d.qk_nope_dim, d.kv_lora_rank, c.n_heads));
  TANDEM_ASSIGN_OR_RETURN(L->wv_b, ld.Slices(p + "attn_v_b.weight", d.kv_lora_rank, d.v_head_dim, c.n_heads));
  TANDEM_ASSIGN_OR_RETURN(L->wo, ld.Matrix(p + "attn_output.weight", c.n_heads * d.v_head_dim, c.dim));
  TANDEM_ASSIGN_OR_RETURN(L->index_q_b,
                          ld.Matrix(p + "indexer.attn_q_b.weight", d.q_lora_rank, d.index_heads * d.index_dim));
  TANDEM_ASSIGN_OR_RETURN(L->index_k, ld.Matrix(p + "indexer.attn_k.weight", c.dim, d.index_dim));
  TANDEM_ASSIGN_OR_RETURN(L->index_k_norm, ld.Vector(p + "indexer.k_norm.weight", d.index_dim));
  TANDEM_ASSIGN_OR_RETURN(L->index_k_norm_bias, ld.Vector(p + "indexer.k_norm.bias", d.index_dim));
  TANDEM_ASSIGN_OR_RETURN(L->index_proj, ld.Matrix(p + "indexer.proj.weight", c.dim, d.index_heads));
  if (l < d.leading_dense) {
    TANDEM_ASSIGN_OR_RETURN(L->w_gate, ld.Matrix(p + "ffn_gate.weight", c.dim, c.ffn_dim));
    TANDEM_ASSIGN_OR_RETURN(L->w_up, ld.Matrix(p + "ffn_up.weight", c.dim, c.ffn_dim));
    TANDEM_ASSIGN_OR_RETURN(L->w_down, ld.Matrix(p + "ffn_down.weight", c.ffn_dim, c.dim));
    return Status::Ok();
  }
  TANDEM_ASSIGN_OR_RETURN(L->router, ld.Matrix(p + "ffn_gate_inp.weight", c.dim, d.n_experts));
  TANDEM_ASSIGN_OR_RETURN(L->expert_bias, ld.Vector(p + "exp_probs_b.bias", d.n_experts, false));
  const int64_t before = ld.bytes();
  TANDEM_ASSIGN_OR_RETURN(L->gate_exps, ld.Slices(p + "ffn_gate_exps.weight", c.dim, d.expert_ffn_dim, d.n_experts));
  TANDEM_ASSIGN_OR_RETURN(L->up_exps, ld.Slices(p + "ffn_up_exps.weight", c.dim, d.expert_ffn_dim, d.n_experts));
  TANDEM_ASSIGN_OR_RETURN(L->down_exps, ld.Slices(p + "ffn_down_exps.weight", d.expert_ffn_dim, c.dim, d.n_experts));
  *expert_bytes += ld.bytes() - before;
  if (d.n_shared_experts > 0) {
    const int64_t shared = d.expert_ffn_dim * d.n_shared_experts;
    TANDEM_ASSIGN_OR_RETURN(L->gate_shexp, ld.Matrix(p + "ffn_gate_shexp.weight", c.dim, shared));
    TANDEM_ASSIGN_OR_RETURN(L->up_shexp, ld.Matrix(p + "ffn_up_shexp.weight", c.dim, shared));
    TANDEM_ASSIGN_OR_RETURN(L->down_shexp, ld.Matrix(p + "ffn_down_shexp.weight", shared, c.dim));
  }
  return Status::Ok();
}

class Deepseek32 : public Architecture {
 public:
  Status ReadConfig(const GgufFile& g, ModelConfig* config) const override {
    ModelConfig& c = *config;
    // MLA: one shared latent (the "KV head"); the query/key head is the
    // nope dims plus the RoPE dims, which are the only ones rotated.
    TANDEM_ASSIGN_OR_RETURN(c.dsa, ReadDsaConfig(g, c.n_layers));
    if (c.dsa.leading_dense == 0) c.ffn_dim = 0;  // no dense layer: no tensor backs it, nothing may be sized by it
    c.n_kv_heads = 1;
    c.head_dim = c.dsa.qk_head_dim();
    c.rope_neox = false;  // the MLA RoPE pairs (2i, 2i+1); the indexer's is NeoX (deepseek32_layer.cc)
    TANDEM_RETURN_IF_ERROR(ReadRopeConfig(g, config));
    if (c.rope_scaling != RopeScaling::kNone) {
      // DeepSeek's YaRN as V3 and V3.2 configure it (mscale = mscale_all_dim = 1, which the GGUF
      // converter writes as yarn_log_multiplier 0.1): RoPE at magnitude 1 and attention scaled by
      // (1 + 0.1 ln factor)^2. Other mscale pairs are defined differently by different readers.
      if (c.rope_scaling != RopeScaling::kYarn || std::fabs(c.dsa.yarn_log_multiplier - 0.1) > 1e-6) {
        return InvalidArgument("deepseek32 RoPE scaling must be YaRN with rope.scaling.yarn_log_multiplier 0.1 "
                               "(mscale_all_dim 1, as DeepSeek V3 and V3.2), not '" +
                               g.GetStringOr("deepseek32.rope.scaling.type", "none") + "' with " +
                               std::to_string(c.dsa.yarn_log_multiplier));
      }
    }
    c.yarn_scales_attention = true;
    return Status::Ok();
  }

  Status LoadLayers(WeightLoader& ld, const ModelConfig& c, ModelWeights* weights) const override {
    auto out = std::make_unique<DsaWeights>();
    int64_t expert_bytes = 0;
    out->layers.resize(size_t(c.n_layers));
    for (int64_t l = 0; l < c.n_layers; ++l) {
      TANDEM_RETURN_IF_ERROR(LoadLayer(ld, c, l, &out->layers[size_t(l)], &expert_bytes));
    }
    // A decoded token reads n_experts_used of each MoE layer's n_experts.
    if (c.dsa.n_experts > 0) {
      weights->matrix_bytes -= expert_bytes / c.dsa.n_experts * (c.dsa.n_experts - c.dsa.n_experts_used);
    }
    weights->ffn_type = kernels::WeightType::kF32;
    for (const DsaLayerWeights& L : out->layers) {
      if (!L.up_shexp.data && !L.w_up.data) continue;
      weights->ffn_type = L.w_up.data ? L.w_up.type : L.up_shexp.type;
      break;
    }
    weights->layers = std::move(out);
    return Status::Ok();
  }

  Status RegisterCache(const ModelConfig& c, CacheSpec* spec) const override {
    // The model's own indexer: its key width, and every query scores (dense
    // attention is top-k at or above the context).
    spec->attention.index_dims = c.dsa.index_dim;
    TANDEM_RETURN_IF_ERROR(spec->attention.Validate());
    const AttentionOptions& a = spec->attention;
    TANDEM_ASSIGN_OR_RETURN(spec->kv_latent, spec->registry.Register({"kv_latent", a.kv_dtype, c.dsa.latent_dim()}));
    TANDEM_ASSIGN_OR_RETURN(spec->index_k, spec->registry.Register({"index_k", a.index_k_dtype, c.dsa.index_dim}));
    return Status::Ok();
  }

  AttentionGeometry Geometry(const ModelConfig& c, const CacheSpec& spec) const override {
    // MLA in its absorbed form is multi-query attention over the cached
    // latent rows: keys are the whole row (latent + RoPE dims), values the
    // same rows (the first kv_lora_rank outputs are used); the scale is the
    // query head's (nope + rope dims).
    AttentionGeometry g;
    g.k = g.v = spec.kv_latent;
    g.head_dim = c.dsa.latent_dim();
    g.kv_heads = 1;
    // YaRN (ReadConfig): the softmax scale times mscale^2, mscale = 1 + 0.1 ln(factor).
    const double mscale = c.rope_scaling == RopeScaling::kYarn ? 1.0 + 0.1 * std::log(c.rope_factor) : 1.0;
    g.scale = float(mscale * mscale / std::sqrt(double(c.dsa.qk_head_dim())));
    g.index_heads = int(c.dsa.index_heads);
    g.index_dims = c.dsa.index_dim;
    g.sparse = spec.attention.kind == AttentionKind::kSparse;
    return g;
  }

  std::unique_ptr<ArchLayers> MakeLayers(const ModelConfig& c) const override { return MakeDeepseek32Layers(c); }

  std::string AttentionAdvice(const ModelConfig& c, const AttentionOptions& a) const override {
    if (a.kind == AttentionKind::kSparse && a.top_k == c.dsa.index_top_k) return "";
    return c.name + " is a deepseek32 model trained with sparse attention over its indexer's top " +
           std::to_string(c.dsa.index_top_k) + " positions; this engine runs " + AttentionFingerprint(a) +
           " (pass --attention sparse --topk " + std::to_string(c.dsa.index_top_k) +
           " for the model's own computation)";
  }

  // The MLA projections and absorptions, the indexer's, and the experts a
  // token uses (routed and shared) or the dense FFN in the leading layers.
  double MatmulFlopsPerToken(const ModelConfig& c) const override {
    const DsaConfig& d = c.dsa;
    const double dim = double(c.dim), heads = double(c.n_heads);
    const double attention = dim * d.q_lora_rank + double(d.q_lora_rank) * heads * d.qk_head_dim() +
                             dim * d.latent_dim() + heads * d.kv_lora_rank * (d.qk_nope_dim + d.v_head_dim) +
                             heads * d.v_head_dim * dim +
                             double(d.q_lora_rank) * d.index_heads * d.index_dim + dim * (d.index_dim + d.index_heads);
    const double moe = dim * d.n_experts + 3.0 * dim * d.expert_ffn_dim * (d.n_experts_used + d.n_shared_experts);
    const double layers = attention * c.n_layers + 3.0 * dim * c.ffn_dim * d.leading_dense +
                          moe * (c.n_layers - d.leading_dense);
    return 2.0 * (layers + dim * c.vocab_size);
  }

  // Every head over the whole latent row (QK and PV).
  double AttentionFlopsPerEntry(const ModelConfig& c) const override {
    return 4.0 * double(c.n_layers) * double(c.n_heads * c.dsa.latent_dim());
  }
};

}  // namespace

const Architecture& Deepseek32Architecture() {
  static const Deepseek32 arch;
  return arch;
}

}  // namespace tandem
