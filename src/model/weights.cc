#include "model/weights.h"

#include "kernels/weight_row.h"

namespace tandem {
namespace {

std::string Shape(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

kernels::WeightType ToWeightType(TensorType t) {
  switch (t) {
    case TensorType::kF32: return kernels::WeightType::kF32;
    case TensorType::kF16: return kernels::WeightType::kF16;
    case TensorType::kBF16: return kernels::WeightType::kBF16;
    case TensorType::kQ8_0: return kernels::WeightType::kQ8_0;
    case TensorType::kQ4_0: return kernels::WeightType::kQ4_0;
    case TensorType::kQ5_0: return kernels::WeightType::kQ5_0;
    case TensorType::kQ4_K: return kernels::WeightType::kQ4_K;
    case TensorType::kQ5_K: return kernels::WeightType::kQ5_K;
    case TensorType::kQ6_K: return kernels::WeightType::kQ6_K;
  }
  return kernels::WeightType::kF32;
}

class Loader {
 public:
  explicit Loader(const GgufFile& g) : g_(g) {}

  StatusOr<const TensorInfo*> Find(const std::string& name, std::vector<uint64_t> dims,
                                   bool required = true) {
    const TensorInfo* t = g_.FindTensor(name);
    if (!t) {
      if (!required) return static_cast<const TensorInfo*>(nullptr);
      return DataLoss("model tensor '" + name + "' is missing");
    }
    if (t->dims != dims) {
      return DataLoss("model tensor '" + name + "' has shape " + Shape(t->dims) + ", expected " +
                      Shape(dims));
    }
    return t;
  }

  StatusOr<kernels::WeightMatrix> Matrix(const std::string& name, int64_t cols, int64_t rows) {
    TANDEM_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {uint64_t(cols), uint64_t(rows)}));
    kernels::WeightMatrix m;
    m.type = ToWeightType(t->type);
    m.data = t->data;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = size_t(t->n_bytes / uint64_t(rows));
    bytes_ += int64_t(t->n_bytes);
    return m;
  }

  // A vector converted to fp32; empty when absent and not required.
  StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n, bool required = true) {
    TANDEM_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {uint64_t(n)}, required));
    std::vector<float> v;
    if (!t) return v;
    v.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = kernels::WeightAt(ToWeightType(t->type), t->data, i);
    return v;
  }

  int64_t bytes() const { return bytes_; }

 private:
  const GgufFile& g_;
  int64_t bytes_ = 0;
};

}  // namespace

StatusOr<ModelWeights> LoadWeights(const GgufFile& gguf, const ModelConfig& c) {
  Loader ld(gguf);
  ModelWeights w;
  TANDEM_ASSIGN_OR_RETURN(w.token_embd, ld.Matrix("token_embd.weight", c.dim, c.vocab_size));
  const int64_t embd_bytes = ld.bytes();  // a lookup reads one row, not the table
  TANDEM_ASSIGN_OR_RETURN(w.output_norm, ld.Vector("output_norm.weight", c.dim));
  if (gguf.FindTensor("output.weight")) {
    TANDEM_ASSIGN_OR_RETURN(w.output, ld.Matrix("output.weight", c.dim, c.vocab_size));
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  w.layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[size_t(l)];
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
  }
  w.matrix_bytes = ld.bytes() - embd_bytes + (w.tied_output ? embd_bytes : 0);
  return w;
}

}  // namespace tandem
