// The deepseek32 layer (model/dsa_config.h), on ForwardPass's batch, cache
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
#include "model/forward.h"

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

}  // namespace

void ForwardPass::ResizeDsa(int n) {
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
  fit(hb_, t * ffn);
  fit(hb2_, t * ffn);
  fit(moe_x_, t * size_t(c_.dim));
  fit(moe_h_, t * size_t(d.expert_ffn_dim));
  fit(moe_h2_, t * size_t(d.expert_ffn_dim));
  fit(moe_y_, t * size_t(c_.dim));
  fit(slot_out_, t * size_t(d.n_experts_used) * size_t(c_.dim));
  fit(ffn_out_, t * size_t(c_.dim));
  slot_expert_.resize(t * size_t(d.n_experts_used));
  slot_weight_.resize(t * size_t(d.n_experts_used));
}

void ForwardPass::DsaLayer(int l, std::span<const SequenceChunk> batch, PagePool& cache) {
  const DsaLayerWeights& w = model_.weights().dsa_layers[size_t(l)];
  const DsaConfig& d = c_.dsa;
  const int n = int(tokens_.size());
  const int64_t dim = c_.dim, heads = c_.n_heads, qk = d.qk_head_dim(), nope = d.qk_nope_dim;
  const int64_t rope = d.qk_rope_dim, lat = d.latent_dim(), kvr = d.kv_lora_rank, ql = d.q_lora_rank;
  const int half = int(rope / 2);
  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(x_.data() + i * dim, w.attn_norm.data(), dim, c_.rms_eps, xb_.data() + i * dim);
  }
  MatMuls({{&w.wq_a, xb_.data(), dim, qa_.data(), ql},
           {&w.wkv_a, xb_.data(), dim, kv_.data(), lat},
           {&w.index_k, xb_.data(), dim, index_keys_.data(), index_dims_},
           {&w.index_proj, xb_.data(), dim, index_weights_.data(), index_heads_}},
          n);
  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(qa_.data() + i * ql, w.q_a_norm.data(), ql, c_.rms_eps, qr_.data() + i * ql);
    // The cache row: the normed latent, then k_pe with RoPE.
    float* row = kvn_.data() + i * lat;
    kernels::RmsNorm(kv_.data() + i * lat, w.kv_a_norm.data(), kvr, c_.rms_eps, row);
    std::memcpy(row + kvr, kv_.data() + i * lat + kvr, size_t(rope) * 4);
    kernels::Rope(row + kvr, 1, int(rope), int(rope), rope_cos_.data() + size_t(i) * half,
                  rope_sin_.data() + size_t(i) * half, false);
  }
  MatMuls({{&w.wq_b, qr_.data(), ql, qfull_.data(), heads * qk},
           {&w.index_q_b, qr_.data(), ql, index_queries_.data(), index_heads_ * index_dims_}},
          n);
  for (int i = 0; i < n; ++i) {
    kernels::Rope(qfull_.data() + i * heads * qk + nope, int(heads), int(qk), int(rope),
                  rope_cos_.data() + size_t(i) * half, rope_sin_.data() + size_t(i) * half, false);
  }
  DsaIndexer(w, n);
  // Absorbed queries: [attn_k_b(h) q_nope(h) | q_pe(h)] per head, over the latent row.
  std::vector<MatMulJob> absorb;
  for (int64_t h = 0; h < heads; ++h) {
    absorb.push_back({&w.wk_b[size_t(h)], qfull_.data() + h * qk, heads * qk, q_.data() + h * lat, heads * lat});
  }
  MatMuls(absorb, n);
  for (int i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      std::memcpy(q_.data() + (i * heads + h) * lat + kvr, qfull_.data() + (i * heads + h) * qk + nope,
                  size_t(rope) * 4);
    }
    const SequenceChunk& s = ChunkOf(batch, i);
    StoreKvRow(kvn_.data() + i * lat, lat, cache.Rows(spec_.kv_latent, l, s.pages).RowBytes(tokens_[size_t(i)].pos));
  }
  StoreIndexKeys(l, batch, cache);
  Attention(l, batch, cache);
  // Each head's latent output (the first kv_lora_rank of its row) through attn_v_b(h).
  std::vector<MatMulJob> values;
  for (int64_t h = 0; h < heads; ++h) {
    values.push_back({&w.wv_b[size_t(h)], att_.data() + h * lat, heads * lat, vals_.data() + h * d.v_head_dim,
                      heads * d.v_head_dim});
  }
  MatMuls(values, n);
  MatMuls({{&w.wo, vals_.data(), heads * d.v_head_dim, xb_.data(), dim}}, n);
  for (int i = 0; i < n; ++i) kernels::Add(x_.data() + i * dim, xb_.data() + i * dim, dim);

  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(x_.data() + i * dim, w.ffn_norm.data(), dim, c_.rms_eps, xb_.data() + i * dim);
  }
  if (l < d.leading_dense) {
    MatMuls({{&w.w_gate, xb_.data(), dim, hb_.data(), c_.ffn_dim}, {&w.w_up, xb_.data(), dim, hb2_.data(), c_.ffn_dim}},
            n);
    for (int i = 0; i < n; ++i) {
      kernels::SiluMul(hb_.data() + size_t(i) * c_.ffn_dim, hb2_.data() + size_t(i) * c_.ffn_dim, c_.ffn_dim);
    }
    MatMuls({{&w.w_down, hb_.data(), c_.ffn_dim, ffn_out_.data(), dim}}, n);
  } else {
    DsaExperts(w, n);
  }
  for (int i = 0; i < n; ++i) kernels::Add(x_.data() + i * dim, ffn_out_.data() + i * dim, dim);
}

// The indexer's per-token key (cached by StoreIndexKeys), queries and head weights.
void ForwardPass::DsaIndexer(const DsaLayerWeights& w, int n) {
  const int64_t rope = c_.dsa.qk_rope_dim, dims = index_dims_;
  const int half = int(rope / 2);
  const float weight_scale = float(1.0 / std::sqrt(double(dims * index_heads_)));
  for (int i = 0; i < n; ++i) {
    const float* cs = rope_cos_.data() + size_t(i) * half;
    const float* sn = rope_sin_.data() + size_t(i) * half;
    float* key = index_keys_.data() + i * dims;
    LayerNorm(key, w.index_k_norm.data(), w.index_k_norm_bias.data(), dims, 1e-6f);
    kernels::Rope(key, 1, int(dims), int(rope), cs, sn, true);
    Hadamard(key, dims);
    float* q = index_queries_.data() + i * dims * index_heads_;
    kernels::Rope(q, index_heads_, int(dims), int(rope), cs, sn, true);
    for (int h = 0; h < index_heads_; ++h) Hadamard(q + h * dims, dims);
    float* weights = index_weights_.data() + size_t(i) * size_t(index_heads_);
    for (int h = 0; h < index_heads_; ++h) weights[h] = weights[h] * weight_scale;
  }
}

// Routes each token of xb_ to its experts and writes the mixture (plus the
// shared experts) to ffn_out_.
void ForwardPass::DsaExperts(const DsaLayerWeights& w, int n) {
  const DsaConfig& d = c_.dsa;
  const int64_t dim = c_.dim, experts = d.n_experts, used = d.n_experts_used, eff = d.expert_ffn_dim;
  const int64_t per_group = experts / d.n_expert_groups;
  MatMuls({{&w.router, xb_.data(), dim, router_.data(), experts}}, n);
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
      std::memcpy(moe_x_.data() + j * dim, xb_.data() + (routed_[size_t(j)] / used) * dim, size_t(dim) * 4);
    }
    MatMuls({{&w.gate_exps[size_t(e)], moe_x_.data(), dim, moe_h_.data(), eff},
             {&w.up_exps[size_t(e)], moe_x_.data(), dim, moe_h2_.data(), eff}},
            m);
    for (int j = 0; j < m; ++j) kernels::SiluMul(moe_h_.data() + j * eff, moe_h2_.data() + j * eff, eff);
    MatMuls({{&w.down_exps[size_t(e)], moe_h_.data(), eff, moe_y_.data(), dim}}, m);
    for (int j = 0; j < m; ++j) {
      std::memcpy(slot_out_.data() + size_t(routed_[size_t(j)]) * dim, moe_y_.data() + j * dim, size_t(dim) * 4);
    }
  }
  const int64_t shared = eff * d.n_shared_experts;
  if (shared > 0) {
    MatMuls({{&w.gate_shexp, xb_.data(), dim, hb_.data(), shared}, {&w.up_shexp, xb_.data(), dim, hb2_.data(), shared}},
            n);
    for (int i = 0; i < n; ++i) kernels::SiluMul(hb_.data() + i * shared, hb2_.data() + i * shared, shared);
  }
  if (shared > 0) MatMuls({{&w.down_shexp, hb_.data(), shared, moe_y_.data(), dim}}, n);
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

}  // namespace tandem
