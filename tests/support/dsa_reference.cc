#include "support/dsa_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "support/reference_model.h"

namespace tandem::testing {
namespace {

using Vec = std::vector<double>;

// Rows [r0, r0 + n) of a [rows][cols] matrix times x.
Vec MatVecRows(const Vec& w, int64_t cols, int64_t r0, int64_t n, const Vec& x) {
  Vec y(size_t(n), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += w[size_t((r0 + r) * cols + c)] * x[size_t(c)];
    y[size_t(r)] = acc;
  }
  return y;
}

// Rotates the n dims at x at position pos by angle pos * freq[i] for pair i:
// pairs (2i, 2i+1) or, neox, (i, i + n/2).
void Rope(double* x, int64_t n, int64_t pos, const std::vector<double>& freq, bool neox) {
  for (int64_t i = 0; i < n / 2; ++i) {
    const double angle = double(pos) * freq[size_t(i)];
    const double c = std::cos(angle), s = std::sin(angle);
    double& a = neox ? x[i] : x[2 * i];
    double& b = neox ? x[i + n / 2] : x[2 * i + 1];
    const double a0 = a, b0 = b;
    a = a0 * c - b0 * s;
    b = a0 * s + b0 * c;
  }
}

// The orthonormal Walsh-Hadamard rotation: y_i = sum_j (-1)^popcount(i & j) x_j / sqrt(n).
void Hadamard(double* x, int64_t n) {
  Vec y(size_t(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < n; ++j)
      acc += (__builtin_popcountll(uint64_t(i & j)) % 2 ? -1.0 : 1.0) * x[j];
    y[size_t(i)] = acc / std::sqrt(double(n));
  }
  std::copy(y.begin(), y.end(), x);
}

// x as float, rounded to the nearest bf16 (ties to even), back to double.
double RoundToBf16(double x) {
  const float f = float(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// in_block / down_block: the activation blocks of gate and up, and of down.
Vec Ffn(const Vec& gate, const Vec& up, const Vec& down, int64_t width, const Vec& x, int in_block, int down_block) {
  const Vec xq = QuantizedActs(x, in_block);
  Vec g = MatVec(gate, xq), u = MatVec(up, xq);
  for (int64_t i = 0; i < width; ++i) g[size_t(i)] = Silu(g[size_t(i)]) * u[size_t(i)];
  return MatVec(down, QuantizedActs(g, down_block));
}

}  // namespace

DsaReference::DsaReference(const GgufFile& g) : g_(g) {
  const std::string a = "deepseek32.";
  auto u = [&](const std::string& k, int64_t fallback = -1) {
    auto v = g.GetUint(a + k);
    if (v.ok()) return int64_t(*v);
    if (fallback >= 0) return fallback;
    throw std::runtime_error("reference: " + a + k + " is missing");
  };
  dim_ = u("embedding_length");
  layers_ = u("block_count");
  heads_ = u("attention.head_count");
  q_lora_ = u("attention.q_lora_rank");
  kv_lora_ = u("attention.kv_lora_rank");
  rope_ = u("rope.dimension_count");
  nope_ = u("attention.key_length_mla") - rope_;
  v_head_ = u("attention.value_length_mla");
  index_heads_ = u("attention.indexer.head_count");
  index_dim_ = u("attention.indexer.key_length");
  index_top_k_ = u("attention.indexer.top_k");
  dense_ = u("leading_dense_block_count", 0);
  experts_ = u("expert_count");
  used_ = u("expert_used_count");
  shared_ = u("expert_shared_count", 0);
  expert_ffn_ = u("expert_feed_forward_length");
  groups_ = u("expert_group_count", 1);
  groups_used_ = u("expert_group_used_count", groups_);
  if (u("expert_gating_func", 2) != 2) throw std::runtime_error("reference: sigmoid gating only");
  eps_ = g.GetFloatOr(a + "attention.layer_norm_rms_epsilon", 1e-6);
  theta_ = g.GetFloatOr(a + "rope.freq_base", 10000.0);
  scale_ = g.GetFloatOr(a + "expert_weights_scale", 1.0);
  const GgufValue* norm = g.Find(a + "expert_weights_norm");
  norm_weights_ = norm && norm->u != 0;
  // RoPE frequencies; with YaRN (DeepSeek's, mscale_all_dim 1): long
  // wavelengths interpolated by the factor, short ones kept, a linear ramp
  // over the pair index between the correction dims, and the attention
  // scale times (1 + 0.1 ln factor)^2.
  freq_.resize(size_t(rope_ / 2));
  for (int64_t i = 0; i < rope_ / 2; ++i) freq_[size_t(i)] = std::pow(theta_, -2.0 * double(i) / double(rope_));
  attn_mscale_ = 1.0;
  const std::string scaling = g.GetStringOr(a + "rope.scaling.type", "none");
  if (scaling == "yarn") {
    const double factor = g.GetFloatOr(a + "rope.scaling.factor", 1.0);
    const double orig = double(u("rope.scaling.original_context_length"));
    const double fast = g.GetFloatOr(a + "rope.scaling.yarn_beta_fast", 32.0);
    const double slow = g.GetFloatOr(a + "rope.scaling.yarn_beta_slow", 1.0);
    auto dim_of = [&](double turns) {
      return double(rope_) * std::log(orig / (turns * 2.0 * M_PI)) / (2.0 * std::log(theta_));
    };
    const double low = std::max(0.0, std::floor(dim_of(fast)));
    const double high = std::min(double(rope_ - 1), std::ceil(dim_of(slow)));
    for (int64_t i = 0; i < rope_ / 2; ++i) {
      const double ramp = std::clamp((double(i) - low) / std::max(high - low, 0.001), 0.0, 1.0);
      const double keep = 1.0 - ramp;  // 1: extrapolate (the original frequency)
      freq_[size_t(i)] = freq_[size_t(i)] / factor * (1.0 - keep) + freq_[size_t(i)] * keep;
    }
    attn_mscale_ = std::pow(1.0 + 0.1 * std::log(factor), 2.0);
  } else if (scaling != "none") {
    throw std::runtime_error("reference: RoPE scaling '" + scaling + "' is not implemented");
  }
  vocab_ = int64_t(g.FindTensor("token_embd.weight")->dims[1]);
}

std::vector<double> DsaReference::T(const std::string& name) const {
  return ReferenceTensor(g_, name);
}

std::vector<double> DsaReference::Forward(const std::vector<int32_t>& tokens, int64_t top_k,
                                          bool bf16_index_keys) const {
  if (top_k <= 0) top_k = index_top_k_;
  const int64_t n = int64_t(tokens.size()), qk = nope_ + rope_, latent = kv_lora_ + rope_;
  // x as the product with tensor `name` sees it (reference_model.h).
  auto A = [&](const std::string& name, const Vec& x) { return QuantizedActs(x, ActBlock(g_, name)); };
  const Vec embd = T("token_embd.weight");
  std::vector<Vec> h(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    h[size_t(t)].assign(embd.begin() + tokens[size_t(t)] * dim_,
                        embd.begin() + (tokens[size_t(t)] + 1) * dim_);
  }
  selections_.assign(size_t(layers_), {});
  boundary_ties_ = 0;
  for (int64_t l = 0; l < layers_; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const Vec attn_norm = T(b + "attn_norm.weight"), q_a = T(b + "attn_q_a.weight"),
              q_a_norm = T(b + "attn_q_a_norm.weight"), q_b = T(b + "attn_q_b.weight"),
              kv_a = T(b + "attn_kv_a_mqa.weight"), kv_a_norm = T(b + "attn_kv_a_norm.weight"),
              k_b = T(b + "attn_k_b.weight"), v_b = T(b + "attn_v_b.weight"),
              wo = T(b + "attn_output.weight"), iq_b = T(b + "indexer.attn_q_b.weight"),
              ik_w = T(b + "indexer.attn_k.weight"), ik_norm = T(b + "indexer.k_norm.weight"),
              ik_bias = T(b + "indexer.k_norm.bias"), iproj = T(b + "indexer.proj.weight");
    // Per token: the cache row [normed latent | roped k_pe], the index key,
    // the absorbed queries [heads][latent], the index queries and weights.
    std::vector<Vec> rows(static_cast<size_t>(n)), index_keys(static_cast<size_t>(n)),
        queries(static_cast<size_t>(n)), index_q(static_cast<size_t>(n)),
        index_w(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      Vec xn;
      RmsNorm(h[size_t(t)], attn_norm, eps_, xn);
      Vec qr;
      RmsNorm(MatVec(q_a, A(b + "attn_q_a.weight", xn)), q_a_norm, eps_, qr);
      Vec q = MatVec(q_b, A(b + "attn_q_b.weight", qr));        // heads x [nope | rope]
      Vec kv = MatVec(kv_a, A(b + "attn_kv_a_mqa.weight", xn));  // [latent | k_pe]
      Vec lat(kv.begin(), kv.begin() + kv_lora_), lat_n;
      RmsNorm(lat, kv_a_norm, eps_, lat_n);
      Vec& row = rows[size_t(t)];
      row = lat_n;
      row.insert(row.end(), kv.begin() + kv_lora_, kv.end());
      Rope(row.data() + kv_lora_, rope_, t, freq_, false);
      Vec& qa = queries[size_t(t)];
      qa.assign(size_t(heads_ * latent), 0.0);
      for (int64_t hd = 0; hd < heads_; ++hd) {
        double* qh = q.data() + hd * qk;
        Rope(qh + nope_, rope_, t, freq_, false);
        // attn_k_b slice hd: [kv_lora rows][nope cols]; absorbed = W q_nope.
        const Vec q_nope = A(b + "attn_k_b.weight", Vec(qh, qh + nope_));
        for (int64_t r = 0; r < kv_lora_; ++r) {
          double acc = 0;
          for (int64_t c = 0; c < nope_; ++c)
            acc += k_b[size_t((hd * kv_lora_ + r) * nope_ + c)] * q_nope[size_t(c)];
          qa[size_t(hd * latent + r)] = acc;
        }
        for (int64_t c = 0; c < rope_; ++c) qa[size_t(hd * latent + kv_lora_ + c)] = qh[nope_ + c];
      }
      // The indexer: heads of [rope | nope] dims, NeoX RoPE on the first rope dims, then the
      // Hadamard rotation.
      Vec& iq = index_q[size_t(t)];
      iq = MatVec(iq_b, A(b + "indexer.attn_q_b.weight", qr));
      for (int64_t hd = 0; hd < index_heads_; ++hd) {
        Rope(iq.data() + hd * index_dim_, rope_, t, freq_, true);
        Hadamard(iq.data() + hd * index_dim_, index_dim_);
      }
      Vec k = MatVec(ik_w, A(b + "indexer.attn_k.weight", xn));
      double mean = 0, var = 0;
      for (double v : k) mean += v;
      mean /= double(index_dim_);
      for (double v : k) var += (v - mean) * (v - mean);
      var /= double(index_dim_);
      for (int64_t i = 0; i < index_dim_; ++i) {
        k[size_t(i)] =
            (k[size_t(i)] - mean) / std::sqrt(var + 1e-6) * ik_norm[size_t(i)] + ik_bias[size_t(i)];
      }
      Rope(k.data(), rope_, t, freq_, true);
      Hadamard(k.data(), index_dim_);
      if (bf16_index_keys) {
        for (double& v : k) v = RoundToBf16(v);
      }
      index_keys[size_t(t)] = k;
      index_w[size_t(t)] = MatVec(iproj, A(b + "indexer.proj.weight", xn));
      for (double& w : index_w[size_t(t)]) w /= std::sqrt(double(index_dim_ * index_heads_));
    }
    selections_[size_t(l)].resize(static_cast<size_t>(n));
    const double kq_scale = attn_mscale_ / std::sqrt(double(qk));
    for (int64_t t = 0; t < n; ++t) {
      // Positions by index score, highest first (ties: the earlier position).
      std::vector<int64_t> pos(size_t(t + 1));
      std::iota(pos.begin(), pos.end(), 0);
      if (t + 1 > top_k) {
        Vec score(size_t(t + 1), 0.0);
        for (int64_t s = 0; s <= t; ++s) {
          for (int64_t hd = 0; hd < index_heads_; ++hd) {
            double dot = 0;
            for (int64_t i = 0; i < index_dim_; ++i) {
              dot += index_q[size_t(t)][size_t(hd * index_dim_ + i)] *
                     index_keys[size_t(s)][size_t(i)];
            }
            score[size_t(s)] += index_w[size_t(t)][size_t(hd)] * std::max(0.0, dot);
          }
        }
        std::stable_sort(pos.begin(), pos.end(),
                         [&](int64_t x, int64_t y) { return score[size_t(x)] > score[size_t(y)]; });
        if (score[size_t(pos[size_t(top_k - 1)])] == score[size_t(pos[size_t(top_k)])])
          ++boundary_ties_;
        pos.resize(size_t(top_k));
        std::sort(pos.begin(), pos.end());
      }
      selections_[size_t(l)][size_t(t)] = pos;
      Vec heads_out(size_t(heads_ * v_head_), 0.0);
      for (int64_t hd = 0; hd < heads_; ++hd) {
        const double* qh = queries[size_t(t)].data() + hd * latent;
        Vec logit(pos.size());
        double max = -INFINITY;
        for (size_t j = 0; j < pos.size(); ++j) {
          double dot = 0;
          for (int64_t i = 0; i < latent; ++i) dot += qh[i] * rows[size_t(pos[j])][size_t(i)];
          logit[j] = dot * kq_scale;
          max = std::max(max, logit[j]);
        }
        double sum = 0;
        for (double& v : logit) sum += (v = std::exp(v - max));
        Vec o(size_t(kv_lora_), 0.0);
        for (size_t j = 0; j < pos.size(); ++j) {
          for (int64_t i = 0; i < kv_lora_; ++i)
            o[size_t(i)] += logit[j] / sum * rows[size_t(pos[j])][size_t(i)];
        }
        // attn_v_b slice hd: [v_head rows][kv_lora cols].
        const Vec v = MatVecRows(v_b, kv_lora_, hd * v_head_, v_head_, A(b + "attn_v_b.weight", o));
        std::copy(v.begin(), v.end(), heads_out.begin() + hd * v_head_);
      }
      const Vec out = MatVec(wo, A(b + "attn_output.weight", heads_out));
      for (int64_t i = 0; i < dim_; ++i) h[size_t(t)][size_t(i)] += out[size_t(i)];
    }
    // The feed-forward: dense in the leading layers, experts after them.
    const Vec ffn_norm = T(b + "ffn_norm.weight");
    const bool dense = l < dense_;
    const Vec gate = dense ? T(b + "ffn_gate.weight") : Vec{},
              up = dense ? T(b + "ffn_up.weight") : Vec{},
              down = dense ? T(b + "ffn_down.weight") : Vec{};
    const Vec router = dense ? Vec{} : T(b + "ffn_gate_inp.weight");
    const Vec bias = dense || !g_.FindTensor(b + "exp_probs_b.bias") ? Vec(size_t(experts_), 0.0)
                                                                     : T(b + "exp_probs_b.bias");
    const Vec ge = dense ? Vec{} : T(b + "ffn_gate_exps.weight"),
              ue = dense ? Vec{} : T(b + "ffn_up_exps.weight"),
              de = dense ? Vec{} : T(b + "ffn_down_exps.weight");
    const bool has_shared = !dense && shared_ > 0;
    const Vec gs = has_shared ? T(b + "ffn_gate_shexp.weight") : Vec{},
              us = has_shared ? T(b + "ffn_up_shexp.weight") : Vec{},
              ds = has_shared ? T(b + "ffn_down_shexp.weight") : Vec{};
    for (int64_t t = 0; t < n; ++t) {
      Vec xn;
      RmsNorm(h[size_t(t)], ffn_norm, eps_, xn);
      Vec out(size_t(dim_), 0.0);
      if (dense) {
        out = Ffn(gate, up, down, int64_t(gate.size()) / dim_, xn, ActBlock(g_, b + "ffn_gate.weight"),
                  ActBlock(g_, b + "ffn_down.weight"));
      } else {
        const Vec logits = MatVec(router, A(b + "ffn_gate_inp.weight", xn));
        Vec prob(static_cast<size_t>(experts_)), biased(static_cast<size_t>(experts_));
        for (int64_t e = 0; e < experts_; ++e) {
          prob[size_t(e)] = 1.0 / (1.0 + std::exp(-logits[size_t(e)]));
          biased[size_t(e)] = prob[size_t(e)] + bias[size_t(e)];
        }
        // Group-limited routing: a group's score is the sum of its two best biased scores.
        const int64_t per = experts_ / groups_;
        std::vector<int64_t> group_order(static_cast<size_t>(groups_));
        std::iota(group_order.begin(), group_order.end(), 0);
        Vec group_score(size_t(groups_), 0.0);
        for (int64_t gi = 0; gi < groups_; ++gi) {
          Vec s(biased.begin() + gi * per, biased.begin() + (gi + 1) * per);
          std::sort(s.rbegin(), s.rend());
          group_score[size_t(gi)] = s[0] + (per > 1 ? s[1] : 0.0);
        }
        std::stable_sort(group_order.begin(), group_order.end(), [&](int64_t x, int64_t y) {
          return group_score[size_t(x)] > group_score[size_t(y)];
        });
        std::vector<int64_t> candidates;
        for (int64_t k = 0; k < groups_used_; ++k) {
          for (int64_t e = 0; e < per; ++e) candidates.push_back(group_order[size_t(k)] * per + e);
        }
        std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t x, int64_t y) {
          return biased[size_t(x)] > biased[size_t(y)];
        });
        candidates.resize(size_t(used_));
        double total = 0;
        for (int64_t e : candidates) total += prob[size_t(e)];
        for (int64_t e : candidates) {
          const double w = (norm_weights_ ? prob[size_t(e)] / std::max(total, 6.103515625e-5)
                                          : prob[size_t(e)]) *
                           scale_;
          const size_t in = size_t(expert_ffn_ * dim_), outw = size_t(dim_ * expert_ffn_);
          const Vec gE(ge.begin() + e * in, ge.begin() + (e + 1) * in),
              uE(ue.begin() + e * in, ue.begin() + (e + 1) * in),
              dE(de.begin() + e * outw, de.begin() + (e + 1) * outw);
          const Vec y = Ffn(gE, uE, dE, expert_ffn_, xn, ActBlock(g_, b + "ffn_gate_exps.weight"),
                            ActBlock(g_, b + "ffn_down_exps.weight"));
          for (int64_t i = 0; i < dim_; ++i) out[size_t(i)] += w * y[size_t(i)];
        }
        if (has_shared) {
          const Vec y = Ffn(gs, us, ds, expert_ffn_ * shared_, xn, ActBlock(g_, b + "ffn_gate_shexp.weight"),
                            ActBlock(g_, b + "ffn_down_shexp.weight"));
          for (int64_t i = 0; i < dim_; ++i) out[size_t(i)] += y[size_t(i)];
        }
      }
      for (int64_t i = 0; i < dim_; ++i) h[size_t(t)][size_t(i)] += out[size_t(i)];
    }
  }
  const Vec out_norm = T("output_norm.weight");
  const Vec output = g_.FindTensor("output.weight") ? T("output.weight") : embd;
  std::vector<double> logits;
  logits.reserve(size_t(n * vocab_));
  for (int64_t t = 0; t < n; ++t) {
    Vec xn;
    RmsNorm(h[size_t(t)], out_norm, eps_, xn);
    const Vec row =
        MatVec(output, A(g_.FindTensor("output.weight") ? "output.weight" : "token_embd.weight", xn));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

}  // namespace tandem::testing
