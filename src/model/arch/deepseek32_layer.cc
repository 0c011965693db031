// The deepseek32 layer (model/arch/deepseek32_config.h), on ForwardPass's batch, cache
// and attention machinery. Every step is per token or a canonical matmul, so
// a token's bits do not depend on the batch or the chunking (invariant 5):
//
//   MLA, absorbed: the cache row is [RMS-normed latent | RoPE'd k_pe]; each
//   query head becomes [attn_k_b(h) q_nope | RoPE'd q_pe] over that row,
//   attends (multi-query, scale 1/sqrt(nope + rope)), and its latent output
//   goes through attn_v_b(h), then attn_output.
//   The lightning indexer: q from the normed query latent, one LayerNormed
//   key per token, NeoX RoPE on the first rope dims, the Hadamard rotation,
//   per-token head weights; the key is cached as index-K.
//   Experts: sigmoid scores, the correction bias for choosing, groups by
//   their two best, the chosen experts' unbiased scores (normalized, scaled)
//   weighting their outputs, summed in expert order, plus the shared experts.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "model/arch/deepseek32.h"
#include "model/forward.h"
#include "model/model.h"

namespace tandem {
namespace {

// The orthonormal Walsh-Hadamard rotation in place (n a power of two):
// butterflies in a fixed order, then one scale.
void Hadamard(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = float(1.0 / std::sqrt(double(n)));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * scale;
}

// LayerNorm with weight and bias, in place, sums in index order.
void LayerNorm(float* x, const float* w, const float* b, int64_t n, float eps) {
  float mean = 0.0f;
  for (int64_t i = 0; i < n; ++i) mean = mean + x[i];
  mean = mean / float(n);
  float var = 0.0f;
  for (int64_t i = 0; i < n; ++i) var = var + (x[i] - mean) * (x[i] - mean);
  var = var / float(n);
  const float inv = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] - mean) * inv * w[i] + b[i];
}

// The k of `among` with the largest v, by (value descending, index
// ascending); NaN ranks lowest, so the order is strict and the choice unique.
std::vector<int32_t> Best(const float* v, const std::vector<int32_t>& among, int64_t k) {
  std::vector<int32_t> order = among;
  auto key = [&](int32_t i) { return std::isnan(v[i]) ? -HUGE_VALF : v[i]; };
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
  order.resize(size_t(std::min<int64_t>(k, int64_t(order.size()))));
  return order;
}

using MatMulJob = ForwardPass::MatMulJob;

class Deepseek32Layers : public ArchLayers {
 public:
  explicit Deepseek32Layers(const ModelConfig& c) : c_(c) {}
  void Reserve(ForwardPass& pass, int n) override;
  void Forward(ForwardPass& pass, int l) override;

 private:
  void Indexer(ForwardPass& pass, const DsaLayerWeights& w, int n);
  void Experts(ForwardPass& pass, const DsaLayerWeights& w, int n);

  const ModelConfig& c_;
  // The q latent (before and after its norm), the compressed KV (before and
  // after), full queries, per-head values, the router's logits and the
  // experts' inputs and outputs; [tokens x width] each.
  AlignedFloats qa_, qr_, kv_, kvn_, qfull_, vals_, router_, moe_x_, moe_h_, moe_h2_, moe_y_, slot_out_, ffn_out_;
  std::vector<int32_t> slot_expert_;  // [token x experts used]: the expert of each slot, ascending
  std::vector<float> slot_weight_;
  std::vector<int64_t> routed_;       // slots (token x used + slot) of one expert (Experts' scratch)
};

void Deepseek32Layers::Reserve(ForwardPass& pass, int n) {
  const DsaConfig& d = c_.dsa;
  const size_t t = size_t(n);
  auto fit = [](AlignedFloats& v, size_t size) {
    if (v.size() < size) v.resize(size);
  };
  fit(qa_, t * size_t(d.q_lora_rank));
  fit(qr_, t * size_t(d.q_lora_rank));
  fit(kv_, t * size_t(d.latent_dim()));
  fit(kvn_, t * size_t(d.latent_dim()));
  fit(qfull_, t * size_t(c_.n_heads * d.qk_head_dim()));
  fit(vals_, t * size_t(c_.n_heads * d.v_head_dim));
  fit(router_, t * size_t(d.n_experts));
  const size_t ffn = size_t(std::max({c_.ffn_dim, d.expert_ffn_dim * d.n_shared_experts, d.expert_ffn_dim}));
  fit(pass.acts().hb, t * ffn);
  fit(pass.acts().hb2, t * ffn);
  fit(moe_x_, t * size_t(c_.dim));
  fit(moe_h_, t * size_t(d.expert_ffn_dim));
  fit(moe_h2_, t * size_t(d.expert_ffn_dim));
  fit(moe_y_, t * size_t(c_.dim));
  fit(slot_out_, t * size_t(d.n_experts_used) * size_t(c_.dim));
  fit(ffn_out_, t * size_t(c_.dim));
  slot_expert_.resize(t * size_t(d.n_experts_used));
  slot_weight_.resize(t * size_t(d.n_experts_used));
}

void Deepseek32Layers::Forward(ForwardPass& pass, int l) {
  const DsaLayerWeights& w = static_cast<const DsaWeights&>(*pass.model().weights().layers).layers[size_t(l)];
  ForwardPass::Activations& a = pass.acts();
  const int64_t index_heads = pass.geometry().index_heads, index_dims = pass.geometry().index_dims;
  const DsaConfig& d = c_.dsa;
  const int n = pass.tokens();
  const int64_t dim = c_.dim, heads = c_.n_heads, qk = d.qk_head_dim(), nope = d.qk_nope_dim;
  const int64_t rope = d.qk_rope_dim, lat = d.latent_dim(), kvr = d.kv_lora_rank, ql = d.q_lora_rank;
  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(a.x.data() + i * dim, w.attn_norm.data(), dim, c_.rms_eps, a.xb.data() + i * dim);
  }
  pass.MatMuls({{&w.wq_a, a.xb.data(), dim, qa_.data(), ql},
           {&w.wkv_a, a.xb.data(), dim, kv_.data(), lat},
           {&w.index_k, a.xb.data(), dim, a.index_keys.data(), index_dims},
           {&w.index_proj, a.xb.data(), dim, a.index_weights.data(), index_heads}},
          n);
  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(qa_.data() + i * ql, w.q_a_norm.data(), ql, c_.rms_eps, qr_.data() + i * ql);
    // The cache row: the normed latent, then k_pe with RoPE.
    float* row = kvn_.data() + i * lat;
    kernels::RmsNorm(kv_.data() + i * lat, w.kv_a_norm.data(), kvr, c_.rms_eps, row);
    std::memcpy(row + kvr, kv_.data() + i * lat + kvr, size_t(rope) * 4);
    kernels::Rope(row + kvr, 1, int(rope), int(rope), pass.rope_cos(i),
                  pass.rope_sin(i), false);
  }
  pass.MatMuls({{&w.wq_b, qr_.data(), ql, qfull_.data(), heads * qk},
           {&w.index_q_b, qr_.data(), ql, a.index_queries.data(), index_heads * index_dims}},
          n);
  for (int i = 0; i < n; ++i) {
    kernels::Rope(qfull_.data() + i * heads * qk + nope, int(heads), int(qk), int(rope),
                  pass.rope_cos(i), pass.rope_sin(i), false);
  }
  Indexer(pass, w, n);
  // Absorbed queries: [attn_k_b(h) q_nope(h) | q_pe(h)] per head, over the latent row.
  std::vector<MatMulJob> absorb;
  for (int64_t h = 0; h < heads; ++h) {
    absorb.push_back({&w.wk_b[size_t(h)], qfull_.data() + h * qk, heads * qk, a.q.data() + h * lat, heads * lat});
  }
  pass.MatMuls(absorb, n);
  for (int i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      std::memcpy(a.q.data() + (i * heads + h) * lat + kvr, qfull_.data() + (i * heads + h) * qk + nope,
                  size_t(rope) * 4);
    }
    pass.StoreKvRow(pass.spec().kv_latent, l, i, kvn_.data() + i * lat, lat);
  }
  pass.StoreIndexKeys(l);
  pass.Attention(l);
  // Each head's latent output (the first kv_lora_rank of its row) through attn_v_b(h).
  std::vector<MatMulJob> values;
  for (int64_t h = 0; h < heads; ++h) {
    values.push_back({&w.wv_b[size_t(h)], a.att.data() + h * lat, heads * lat, vals_.data() + h * d.v_head_dim,
                      heads * d.v_head_dim});
  }
  pass.MatMuls(values, n);
  pass.MatMuls({{&w.wo, vals_.data(), heads * d.v_head_dim, a.xb.data(), dim}}, n);
  for (int i = 0; i < n; ++i) kernels::Add(a.x.data() + i * dim, a.xb.data() + i * dim, dim);

  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(a.x.data() + i * dim, w.ffn_norm.data(), dim, c_.rms_eps, a.xb.data() + i * dim);
  }
  if (l < d.leading_dense) {
    pass.MatMuls({{&w.w_gate, a.xb.data(), dim, a.hb.data(), c_.ffn_dim}, {&w.w_up, a.xb.data(), dim, a.hb2.data(), c_.ffn_dim}},
            n);
    for (int i = 0; i < n; ++i) {
      kernels::SiluMul(a.hb.data() + size_t(i) * c_.ffn_dim, a.hb2.data() + size_t(i) * c_.ffn_dim, c_.ffn_dim);
    }
    pass.MatMuls({{&w.w_down, a.hb.data(), c_.ffn_dim, ffn_out_.data(), dim}}, n);
  } else {
    Experts(pass, w, n);
  }
  for (int i = 0; i < n; ++i) kernels::Add(a.x.data() + i * dim, ffn_out_.data() + i * dim, dim);
}

// The indexer's per-token key (cached by StoreIndexKeys), queries and head weights.
void Deepseek32Layers::Indexer(ForwardPass& pass, const DsaLayerWeights& w, int n) {
  ForwardPass::Activations& a = pass.acts();
  const int index_heads = pass.geometry().index_heads;
  const int64_t index_dims = pass.geometry().index_dims;
  const int64_t rope = c_.dsa.qk_rope_dim, dims = index_dims;
  const float weight_scale = float(1.0 / std::sqrt(double(dims * index_heads)));
  for (int i = 0; i < n; ++i) {
    const float* cs = pass.rope_cos(i);
    const float* sn = pass.rope_sin(i);
    float* key = a.index_keys.data() + i * dims;
    LayerNorm(key, w.index_k_norm.data(), w.index_k_norm_bias.data(), dims, 1e-6f);
    kernels::Rope(key, 1, int(dims), int(rope), cs, sn, true);
    Hadamard(key, dims);
    float* q = a.index_queries.data() + i * dims * index_heads;
    kernels::Rope(q, index_heads, int(dims), int(rope), cs, sn, true);
    for (int h = 0; h < index_heads; ++h) Hadamard(q + h * dims, dims);
    float* weights = a.index_weights.data() + size_t(i) * size_t(index_heads);
    for (int h = 0; h < index_heads; ++h) weights[h] = weights[h] * weight_scale;
  }
}

// Routes each token of a.xb to its experts and writes the mixture (plus the
// shared experts) to ffn_out_.
void Deepseek32Layers::Experts(ForwardPass& pass, const DsaLayerWeights& w, int n) {
  ForwardPass::Activations& a = pass.acts();
  const DsaConfig& d = c_.dsa;
  const int64_t dim = c_.dim, experts = d.n_experts, used = d.n_experts_used, eff = d.expert_ffn_dim;
  const int64_t per_group = experts / d.n_expert_groups;
  pass.MatMuls({{&w.router, a.xb.data(), dim, router_.data(), experts}}, n);
  std::vector<float> prob(static_cast<size_t>(experts)), biased(static_cast<size_t>(experts));
  std::vector<float> group_score(static_cast<size_t>(d.n_expert_groups));
  std::vector<int32_t> all_groups(static_cast<size_t>(d.n_expert_groups));
  for (int64_t g = 0; g < d.n_expert_groups; ++g) all_groups[size_t(g)] = int32_t(g);
  for (int i = 0; i < n; ++i) {
    for (int64_t e = 0; e < experts; ++e) {
      prob[size_t(e)] = 1.0f / (1.0f + kernels::ExpDeterministic(-router_[size_t(i * experts + e)]));
      biased[size_t(e)] = prob[size_t(e)] + (w.expert_bias.empty() ? 0.0f : w.expert_bias[size_t(e)]);
    }
    std::vector<int32_t> candidates;
    if (d.n_expert_groups > 1) {
      for (int64_t g = 0; g < d.n_expert_groups; ++g) {
        std::vector<int32_t> members(static_cast<size_t>(per_group));
        for (int64_t e = 0; e < per_group; ++e) members[size_t(e)] = int32_t(g * per_group + e);
        const std::vector<int32_t> two = Best(biased.data(), members, 2);
        group_score[size_t(g)] = biased[size_t(two[0])] + (two.size() > 1 ? biased[size_t(two[1])] : 0.0f);
      }
      for (int32_t g : Best(group_score.data(), all_groups, d.n_expert_groups_used)) {
        for (int64_t e = 0; e < per_group; ++e) candidates.push_back(int32_t(g * per_group + e));
      }
    } else {
      for (int64_t e = 0; e < experts; ++e) candidates.push_back(int32_t(e));
    }
    std::vector<int32_t> chosen = Best(biased.data(), candidates, used);
    std::sort(chosen.begin(), chosen.end());
    float total = 0.0f;
    for (int32_t e : chosen) total = total + prob[size_t(e)];
    const float denom = std::max(total, 6.103515625e-5f);
    for (int64_t s = 0; s < used; ++s) {
      const int32_t e = chosen[size_t(s)];
      const float p = d.expert_weights_norm ? prob[size_t(e)] / denom : prob[size_t(e)];
      slot_expert_[size_t(i * used + s)] = e;
      slot_weight_[size_t(i * used + s)] = p * float(d.expert_weights_scale);
    }
  }
  // Each expert over the tokens routed to it, outputs into their slots.
  for (int64_t e = 0; e < experts; ++e) {
    routed_.clear();
    for (int64_t k = 0; k < int64_t(n) * used; ++k) {
      if (slot_expert_[size_t(k)] == e) routed_.push_back(k);
    }
    const int m = int(routed_.size());
    if (m == 0) continue;
    for (int j = 0; j < m; ++j) {
      std::memcpy(moe_x_.data() + j * dim, a.xb.data() + (routed_[size_t(j)] / used) * dim, size_t(dim) * 4);
    }
    pass.MatMuls({{&w.gate_exps[size_t(e)], moe_x_.data(), dim, moe_h_.data(), eff},
             {&w.up_exps[size_t(e)], moe_x_.data(), dim, moe_h2_.data(), eff}},
            m);
    for (int j = 0; j < m; ++j) kernels::SiluMul(moe_h_.data() + j * eff, moe_h2_.data() + j * eff, eff);
    pass.MatMuls({{&w.down_exps[size_t(e)], moe_h_.data(), eff, moe_y_.data(), dim}}, m);
    for (int j = 0; j < m; ++j) {
      std::memcpy(slot_out_.data() + size_t(routed_[size_t(j)]) * dim, moe_y_.data() + j * dim, size_t(dim) * 4);
    }
  }
  const int64_t shared = eff * d.n_shared_experts;
  if (shared > 0) {
    pass.MatMuls({{&w.gate_shexp, a.xb.data(), dim, a.hb.data(), shared}, {&w.up_shexp, a.xb.data(), dim, a.hb2.data(), shared}},
            n);
    for (int i = 0; i < n; ++i) kernels::SiluMul(a.hb.data() + i * shared, a.hb2.data() + i * shared, shared);
  }
  if (shared > 0) pass.MatMuls({{&w.down_shexp, a.hb.data(), shared, moe_y_.data(), dim}}, n);
  for (int i = 0; i < n; ++i) {
    float* out = ffn_out_.data() + i * dim;
    for (int64_t j = 0; j < dim; ++j) out[j] = 0.0f;
    for (int64_t s = 0; s < used; ++s) {  // slots in expert order
      const float wt = slot_weight_[size_t(i * used + s)];
      const float* y = slot_out_.data() + (i * used + s) * dim;
      for (int64_t j = 0; j < dim; ++j) out[j] = out[j] + wt * y[j];
    }
    if (shared > 0) kernels::Add(out, moe_y_.data() + i * dim, dim);
  }
}

}  // namespace

std::unique_ptr<ArchLayers> MakeDeepseek32Layers(const ModelConfig& config) {
  return std::make_unique<Deepseek32Layers>(config);
}

}  // namespace tandem
