#include "model/arch/llama.h"

#include <cmath>

#include "kernels/ops.h"
#include "model/forward.h"
#include "model/model.h"

namespace tandem {
namespace {

class LlamaLayers : public ArchLayers {
 public:
  explicit LlamaLayers(const LlamaFamily& arch) : arch_(arch) {}
  void Forward(ForwardPass& pass, int l) override;

 private:
  const LlamaFamily& arch_;
};

void LlamaLayers::Forward(ForwardPass& pass, int l) {
  const ModelConfig& c = pass.model().config();
  const LlamaLayerWeights& w = static_cast<const LlamaWeights&>(*pass.model().weights().layers).layers[size_t(l)];
  ForwardPass::Activations& a = pass.acts();
  const int n = pass.tokens();
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim();
  pass.ForTokens(n, dim, [&](int i0, int i1) {
    for (int i = i0; i < i1; ++i) {
      kernels::RmsNorm(a.x.data() + i * dim, w.attn_norm.data(), dim, c.rms_eps, a.xb.data() + i * dim);
    }
  });
  pass.MatMuls({{&w.wq, a.xb.data(), dim, a.q.data(), qd},
                {&w.wk, a.xb.data(), dim, a.k.data(), kvd},
                {&w.wv, a.xb.data(), dim, a.v.data(), kvd}},
               n);
  pass.ForTokens(n, qd + 2 * kvd, [&](int i0, int i1) {
    for (int i = i0; i < i1; ++i) {
      float* q = a.q.data() + i * qd;
      float* k = a.k.data() + i * kvd;
      float* v = a.v.data() + i * kvd;
      if (!w.q_bias.empty()) kernels::Add(q, w.q_bias.data(), qd);
      if (!w.k_bias.empty()) kernels::Add(k, w.k_bias.data(), kvd);
      if (!w.v_bias.empty()) kernels::Add(v, w.v_bias.data(), kvd);
      arch_.ShapeQueryKey(c, w, q, k);
      kernels::Rope(q, int(c.n_heads), int(c.head_dim), int(c.rope_dims), pass.rope_cos(i), pass.rope_sin(i),
                    c.rope_neox);
      kernels::Rope(k, int(c.n_kv_heads), int(c.head_dim), int(c.rope_dims), pass.rope_cos(i), pass.rope_sin(i),
                    c.rope_neox);
      pass.StoreKvRow(pass.spec().k, l, i, k, kvd);  // each token its own row
      pass.StoreKvRow(pass.spec().v, l, i, v, kvd);
    }
  });
  if (pass.geometry().derived_indexer) pass.DeriveIndexKeys(l);
  pass.Attention(l);
  pass.MatMuls({{&w.wo, a.att.data(), qd, a.xb.data(), dim}}, n);
  pass.ForTokens(n, dim, [&](int i0, int i1) {
    for (int i = i0; i < i1; ++i) {
      kernels::Add(a.x.data() + i * dim, a.xb.data() + i * dim, dim);
      kernels::RmsNorm(a.x.data() + i * dim, w.ffn_norm.data(), dim, c.rms_eps, a.xb.data() + i * dim);
    }
  });
  pass.MatMuls({{&w.w_gate, a.xb.data(), dim, a.hb.data(), c.ffn_dim},
                {&w.w_up, a.xb.data(), dim, a.hb2.data(), c.ffn_dim}},
               n);
  pass.ForTokens(n, c.ffn_dim, [&](int i0, int i1) {
    for (int i = i0; i < i1; ++i) {
      kernels::SiluMul(a.hb.data() + size_t(i) * c.ffn_dim, a.hb2.data() + size_t(i) * c.ffn_dim, c.ffn_dim);
    }
  });
  pass.MatMuls({{&w.w_down, a.hb.data(), c.ffn_dim, a.xb.data(), dim}}, n);
  pass.ForTokens(n, dim, [&](int i0, int i1) {
    for (int i = i0; i < i1; ++i) kernels::Add(a.x.data() + i * dim, a.xb.data() + i * dim, dim);
  });
}

}  // namespace

Status LlamaFamily::ReadConfig(const GgufFile& g, ModelConfig* config) const {
  ModelConfig& c = *config;
  const std::string& a = c.architecture;
  c.n_kv_heads = int64_t(g.GetUintOr(a + ".attention.head_count_kv", uint64_t(c.n_heads)));
  if (c.n_kv_heads <= 0 || c.n_kv_heads > c.n_heads) {
    return DataLoss("GGUF metadata '" + a + ".attention.head_count_kv' = " + std::to_string(c.n_kv_heads) +
                    " is out of range");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return DataLoss("attention.head_count " + std::to_string(c.n_heads) +
                    " is not a multiple of attention.head_count_kv " + std::to_string(c.n_kv_heads));
  }
  c.head_dim = int64_t(g.GetUintOr(a + ".attention.key_length", uint64_t(c.dim / c.n_heads)));
  if (c.head_dim <= 0 || c.head_dim > 4096) {
    return DataLoss("GGUF metadata '" + a + ".attention.key_length' = " + std::to_string(c.head_dim) +
                    " is out of range");
  }
  if (c.head_dim % 2 != 0) return DataLoss("attention head dimension must be even for RoPE");
  c.rope_neox = neox_rope_;
  return ReadRopeConfig(g, config);
}

Status LlamaFamily::LoadLayers(WeightLoader& ld, const ModelConfig& c, ModelWeights* weights) const {
  auto out = std::make_unique<LlamaWeights>();
  out->layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayerWeights& L = out->layers[size_t(l)];
    TANDEM_ASSIGN_OR_RETURN(L.attn_norm, ld.Vector(p + "attn_norm.weight", c.dim));
    TANDEM_ASSIGN_OR_RETURN(L.ffn_norm, ld.Vector(p + "ffn_norm.weight", c.dim));
    TANDEM_ASSIGN_OR_RETURN(L.wq, ld.Matrix(p + "attn_q.weight", c.dim, c.q_dim()));
    TANDEM_ASSIGN_OR_RETURN(L.wk, ld.Matrix(p + "attn_k.weight", c.dim, c.kv_dim()));
    TANDEM_ASSIGN_OR_RETURN(L.wv, ld.Matrix(p + "attn_v.weight", c.dim, c.kv_dim()));
    TANDEM_ASSIGN_OR_RETURN(L.wo, ld.Matrix(p + "attn_output.weight", c.q_dim(), c.dim));
    TANDEM_ASSIGN_OR_RETURN(L.w_gate, ld.Matrix(p + "ffn_gate.weight", c.dim, c.ffn_dim));
    TANDEM_ASSIGN_OR_RETURN(L.w_up, ld.Matrix(p + "ffn_up.weight", c.dim, c.ffn_dim));
    TANDEM_ASSIGN_OR_RETURN(L.w_down, ld.Matrix(p + "ffn_down.weight", c.ffn_dim, c.dim));
    TANDEM_ASSIGN_OR_RETURN(L.q_bias, ld.Vector(p + "attn_q.bias", c.q_dim(), false));
    TANDEM_ASSIGN_OR_RETURN(L.k_bias, ld.Vector(p + "attn_k.bias", c.kv_dim(), false));
    TANDEM_ASSIGN_OR_RETURN(L.v_bias, ld.Vector(p + "attn_v.bias", c.kv_dim(), false));
    TANDEM_RETURN_IF_ERROR(LoadMemberTensors(ld, c, p, &L));
  }
  weights->ffn_type = out->layers.empty() ? kernels::WeightType::kF32 : out->layers[0].w_up.type;
  weights->layers = std::move(out);
  return Status::Ok();
}

Status LlamaFamily::RegisterCache(const ModelConfig& c, CacheSpec* spec) const {
  const AttentionOptions& a = spec->attention;
  TANDEM_ASSIGN_OR_RETURN(spec->k, spec->registry.Register({"k", a.kv_dtype, c.kv_dim()}));
  TANDEM_ASSIGN_OR_RETURN(spec->v, spec->registry.Register({"v", a.kv_dtype, c.kv_dim()}));
  if (a.kind == AttentionKind::kSparse) {
    TANDEM_ASSIGN_OR_RETURN(spec->index_k, spec->registry.Register({"index_k", a.index_k_dtype, a.index_dims}));
  }
  return Status::Ok();
}

AttentionGeometry LlamaFamily::Geometry(const ModelConfig& c, const CacheSpec& spec) const {
  AttentionGeometry g;
  g.k = spec.k;
  g.v = spec.v;
  g.head_dim = c.head_dim;
  g.kv_heads = c.n_kv_heads;
  g.scale = float(1.0 / std::sqrt(double(c.head_dim)));
  g.sparse = g.derived_indexer = spec.index_k >= 0;  // the indexer's shape comes from model/indexer.h
  return g;
}

std::unique_ptr<ArchLayers> LlamaFamily::MakeLayers(const ModelConfig&) const {
  return std::make_unique<LlamaLayers>(*this);
}

double LlamaFamily::MatmulFlopsPerToken(const ModelConfig& c) const {
  const double per_layer = double(c.dim) * (c.q_dim() + 2 * c.kv_dim()) + double(c.q_dim()) * c.dim +
                           3.0 * double(c.dim) * c.ffn_dim;
  return 2.0 * (per_layer * c.n_layers + double(c.dim) * c.vocab_size);
}

double LlamaFamily::AttentionFlopsPerEntry(const ModelConfig& c) const {
  return 4.0 * double(c.n_layers) * double(c.q_dim());  // QK and PV
}

const Architecture& LlamaArchitecture() {
  static const LlamaFamily arch(/*neox_rope=*/false);
  return arch;
}

const Architecture& Qwen2Architecture() {
  static const LlamaFamily arch(/*neox_rope=*/true);
  return arch;
}

}  // namespace tandem
