#include "support/reference_model.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/quant_dot.h"
#include "kernels/weight_row.h"

namespace tandem::testing {
namespace {

double HalfToDouble(uint16_t h) {
  const int exp = (h >> 10) & 31, man = h & 1023;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(double(man), -24);
  if (exp == 31) return man ? NAN : sign * INFINITY;
  return sign * std::ldexp(double(1024 + man), exp - 25);
}

double ElementAt(const TensorInfo& t, uint64_t i) {
  const uint8_t* p = t.data;
  switch (t.type) {
    case TensorType::kF32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case TensorType::kF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return HalfToDouble(h); }
    case TensorType::kBF16: {
      uint16_t h; std::memcpy(&h, p + 2 * i, 2);
      uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f;
    }
    case TensorType::kQ8_0: {
      const uint8_t* block = p + (i / 32) * 34;
      uint16_t d; std::memcpy(&d, block, 2);
      return HalfToDouble(d) * double(int8_t(block[2 + i % 32]));
    }
    // The block-quantized types' fp32 values are defined by their decode
    // formulas (kernels/quant_blocks.h); blocks are contiguous across rows.
    case TensorType::kQ4_0: return kernels::WeightAt(kernels::WeightType::kQ4_0, p, int64_t(i));
    case TensorType::kQ5_0: return kernels::WeightAt(kernels::WeightType::kQ5_0, p, int64_t(i));
    case TensorType::kQ4_K: return kernels::WeightAt(kernels::WeightType::kQ4_K, p, int64_t(i));
    case TensorType::kQ5_K: return kernels::WeightAt(kernels::WeightType::kQ5_K, p, int64_t(i));
    case TensorType::kQ6_K: return kernels::WeightAt(kernels::WeightType::kQ6_K, p, int64_t(i));
  }
  return 0;
}

}  // namespace

void RmsNorm(const std::vector<double>& x, const std::vector<double>& w, double eps,
             std::vector<double>& out) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * s * w[i];
}

// y = W x with W stored [rows][cols] (GGUF dims {cols, rows}).
std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x) {
  const size_t cols = x.size(), rows = w.size() / cols;
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (size_t c = 0; c < cols; ++c) acc += w[r * cols + c] * x[c];
    y[r] = acc;
  }
  return y;
}

int ActBlock(const GgufFile& g, const std::string& name) {
  const TensorInfo* t = g.FindTensor(name);
  if (!t) throw std::runtime_error("reference: tensor '" + name + "' is missing");
  switch (t->type) {
    case TensorType::kQ4_K: return kernels::ActBlockFor(kernels::WeightType::kQ4_K);
    case TensorType::kQ5_K: return kernels::ActBlockFor(kernels::WeightType::kQ5_K);
    case TensorType::kQ6_K: return kernels::ActBlockFor(kernels::WeightType::kQ6_K);
    case TensorType::kQ8_0: return kernels::ActBlockFor(kernels::WeightType::kQ8_0);
    case TensorType::kQ4_0: return kernels::ActBlockFor(kernels::WeightType::kQ4_0);
    case TensorType::kQ5_0: return kernels::ActBlockFor(kernels::WeightType::kQ5_0);
    default: return 0;
  }
}

std::vector<double> QuantizedActs(const std::vector<double>& x, int block) {
  if (block == 0) return x;
  std::vector<float> xf(x.begin(), x.end());
  std::vector<double> out(x.size());
  std::vector<int8_t> q(static_cast<size_t>(block));
  std::vector<int16_t> sums(static_cast<size_t>(block / 16));
  for (size_t b0 = 0; b0 + size_t(block) <= x.size(); b0 += size_t(block)) {
    float d = 0;
    kernels::QuantizeActBlock(xf.data() + b0, block, q.data(), &d, sums.data());
    for (int k = 0; k < block; ++k) out[b0 + size_t(k)] = double(q[size_t(k)]) * double(d);
  }
  return out;
}

std::vector<double> ReferenceTensor(const GgufFile& g, const std::string& name) {
  const TensorInfo* t = g.FindTensor(name);
  if (!t) throw std::runtime_error("reference: tensor '" + name + "' is missing");
  std::vector<double> v(t->NumElements());
  for (uint64_t i = 0; i < v.size(); ++i) v[i] = ElementAt(*t, i);
  return v;
}

ReferenceModel::ReferenceModel(const GgufFile& g) : g_(g) {
  arch_ = *g.GetString("general.architecture");
  dim_ = int64_t(*g.GetUint(arch_ + ".embedding_length"));
  layers_ = int64_t(*g.GetUint(arch_ + ".block_count"));
  heads_ = int64_t(*g.GetUint(arch_ + ".attention.head_count"));
  kv_heads_ = int64_t(g.GetUintOr(arch_ + ".attention.head_count_kv", uint64_t(heads_)));
  head_dim_ = int64_t(g.GetUintOr(arch_ + ".attention.key_length", uint64_t(dim_ / heads_)));
  ffn_ = int64_t(*g.GetUint(arch_ + ".feed_forward_length"));
  vocab_ = int64_t(g.FindTensor("token_embd.weight")->dims[1]);
  eps_ = g.GetFloatOr(arch_ + ".attention.layer_norm_rms_epsilon", 1e-5);
  theta_ = g.GetFloatOr(arch_ + ".rope.freq_base", 10000.0);
  neox_ = arch_ == "qwen2" || arch_ == "qwen3";
  if (g.GetStringOr(arch_ + ".rope.scaling.type", "none") == "linear") {
    linear_scale_ = g.GetFloatOr(arch_ + ".rope.scaling.factor", 1.0);
  }
}

std::vector<double> ReferenceModel::Tensor(const std::string& name) const { return ReferenceTensor(g_, name); }

std::vector<double> ReferenceModel::Forward(const std::vector<int32_t>& tokens) const {
  const size_t n = tokens.size();
  const int64_t kvd = kv_heads_ * head_dim_, group = heads_ / kv_heads_;
  const std::vector<double> embd = Tensor("token_embd.weight");
  std::vector<std::vector<double>> x(n);
  for (size_t t = 0; t < n; ++t) {
    x[t].assign(embd.begin() + tokens[t] * dim_, embd.begin() + (tokens[t] + 1) * dim_);
  }
  auto rope = [&](std::vector<double>& v, int64_t n_heads, size_t pos) {
    for (int64_t h = 0; h < n_heads; ++h) {
      for (int64_t i = 0; i < head_dim_ / 2; ++i) {
        const double ang = double(pos) / linear_scale_ * std::pow(theta_, -2.0 * double(i) / double(head_dim_));
        const int64_t a = h * head_dim_ + (neox_ ? i : 2 * i);
        const int64_t b = h * head_dim_ + (neox_ ? i + head_dim_ / 2 : 2 * i + 1);
        const double x0 = v[size_t(a)], x1 = v[size_t(b)];
        v[size_t(a)] = x0 * std::cos(ang) - x1 * std::sin(ang);
        v[size_t(b)] = x0 * std::sin(ang) + x1 * std::cos(ang);
      }
    }
  };
  for (int64_t l = 0; l < layers_; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const auto an = Tensor(p + "attn_norm.weight"), fn = Tensor(p + "ffn_norm.weight");
    const auto wq = Tensor(p + "attn_q.weight"), wk = Tensor(p + "attn_k.weight");
    const auto wv = Tensor(p + "attn_v.weight"), wo = Tensor(p + "attn_output.weight");
    const auto wg = Tensor(p + "ffn_gate.weight"), wu = Tensor(p + "ffn_up.weight");
    const auto wd = Tensor(p + "ffn_down.weight");
    std::vector<std::vector<double>> q(n), k(n), v(n);
    std::vector<double> xb;
    for (size_t t = 0; t < n; ++t) {
      RmsNorm(x[t], an, eps_, xb);
      q[t] = MatVec(wq, Acts(p + "attn_q.weight", xb)), k[t] = MatVec(wk, Acts(p + "attn_k.weight", xb));
      v[t] = MatVec(wv, Acts(p + "attn_v.weight", xb));
      if (g_.FindTensor(p + "attn_q.bias")) {
        const auto bq = Tensor(p + "attn_q.bias"), bk = Tensor(p + "attn_k.bias"), bv = Tensor(p + "attn_v.bias");
        for (size_t i = 0; i < bq.size(); ++i) q[t][i] += bq[i];
        for (size_t i = 0; i < bk.size(); ++i) k[t][i] += bk[i], v[t][i] += bv[i];
      }
      if (g_.FindTensor(p + "attn_q_norm.weight")) {  // qwen3: each head RMS-normed before RoPE
        const auto qn = Tensor(p + "attn_q_norm.weight"), kn = Tensor(p + "attn_k_norm.weight");
        auto norm_heads = [&](std::vector<double>& v, int64_t n_heads, const std::vector<double>& w) {
          for (int64_t h = 0; h < n_heads; ++h) {
            std::vector<double> head(v.begin() + h * head_dim_, v.begin() + (h + 1) * head_dim_), out;
            RmsNorm(head, w, eps_, out);
            std::copy(out.begin(), out.end(), v.begin() + h * head_dim_);
          }
        };
        norm_heads(q[t], heads_, qn);
        norm_heads(k[t], kv_heads_, kn);
      }
      rope(q[t], heads_, t);
      rope(k[t], kv_heads_, t);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> att(size_t(heads_ * head_dim_), 0.0);
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t off = (h / group) * head_dim_;
        std::vector<double> s(t + 1);
        double mx = -INFINITY, sum = 0;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < head_dim_; ++i) d += q[t][size_t(h * head_dim_ + i)] * k[j][size_t(off + i)];
          s[j] = d / std::sqrt(double(head_dim_));
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < head_dim_; ++i)
            att[size_t(h * head_dim_ + i)] += s[j] / sum * v[j][size_t(off + i)];
      }
      const auto o = MatVec(wo, Acts(p + "attn_output.weight", att));
      for (int64_t i = 0; i < dim_; ++i) x[t][size_t(i)] += o[size_t(i)];
      RmsNorm(x[t], fn, eps_, xb);
      auto g = MatVec(wg, Acts(p + "ffn_gate.weight", xb));
      const auto u = MatVec(wu, Acts(p + "ffn_up.weight", xb));
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const auto d = MatVec(wd, Acts(p + "ffn_down.weight", g));
      for (int64_t i = 0; i < dim_; ++i) x[t][size_t(i)] += d[size_t(i)];
    }
    (void)kvd;
  }
  const auto on = Tensor("output_norm.weight");
  const auto out = g_.FindTensor("output.weight") ? Tensor("output.weight") : embd;
  std::vector<double> logits;
  std::vector<double> xb;
  for (size_t t = 0; t < n; ++t) {
    RmsNorm(x[t], on, eps_, xb);
    const auto row = MatVec(out, Acts(g_.FindTensor("output.weight") ? "output.weight" : "token_embd.weight", xb));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

double NormalizedError(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace tandem::testing
