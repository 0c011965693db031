#include "model/weights.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>

#include "kernels/quant_pack.h"
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
  Loader(const GgufFile& g, std::vector<std::shared_ptr<const kernels::PackedWeights>>* packed, bool pack)
      : g_(g), packed_(packed), pack_(pack) {}

  // Repacks a block-quantized matrix for the integer kernels
  // (kernels/quant_pack.h): its bytes now, written by PackAll.
  Status Pack(kernels::WeightMatrix* m) {
    if (!pack_) return Status::Ok();
    auto p = std::make_shared<const kernels::PackedWeights>(*m, false);
    if (p->data() == nullptr) {
      if (p->size() == 0) return Status::Ok();  // not a packed type
      return ResourceExhausted("out of memory repacking a " + std::to_string(m->rows) + " x " +
                               std::to_string(m->cols) + " matrix (" + std::to_string(p->size()) + " bytes)");
    }
    m->packed = p->data();
    jobs_.push_back({*m, const_cast<uint8_t*>(p->data())});
    packed_->push_back(std::move(p));
    return Status::Ok();
  }

  // Writes every packing Pack allocated, the matrices shared among threads.
  void PackAll() {
    const int threads = int(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 16));
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < jobs_.size(); i = next++) kernels::PackRows(jobs_[i].w, 0, jobs_[i].w.rows, jobs_[i].out);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads && size_t(t) < jobs_.size(); ++t) {
      try {
        pool.emplace_back(work);
      } catch (const std::system_error&) {
        break;  // no more threads: the ones there (and this one) do the rest
      }
    }
    work();
    for (auto& t : pool) t.join();
    jobs_.clear();
  }

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

  StatusOr<kernels::WeightMatrix> Matrix(const std::string& name, int64_t cols, int64_t rows, bool pack = true) {
    TANDEM_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {uint64_t(cols), uint64_t(rows)}));
    kernels::WeightMatrix m;
    m.type = ToWeightType(t->type);
    m.data = t->data;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = size_t(t->n_bytes / uint64_t(rows));
    bytes_ += int64_t(t->n_bytes);
    if (pack) TANDEM_RETURN_IF_ERROR(Pack(&m));
    return m;
  }

  // The n slices of a 3-D tensor [cols, rows, n], each a rows x cols matrix.
  StatusOr<std::vector<kernels::WeightMatrix>> Slices(const std::string& name, int64_t cols, int64_t rows,
                                                      int64_t n) {
    TANDEM_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {uint64_t(cols), uint64_t(rows), uint64_t(n)}));
    std::vector<kernels::WeightMatrix> out(static_cast<size_t>(n));
    const size_t row_bytes = size_t(t->n_bytes / uint64_t(rows * n));
    for (int64_t i = 0; i < n; ++i) {
      out[size_t(i)] = {ToWeightType(t->type), t->data + size_t(i * rows) * row_bytes, rows, cols, row_bytes};
      TANDEM_RETURN_IF_ERROR(Pack(&out[size_t(i)]));
    }
    bytes_ += int64_t(t->n_bytes);
    return out;
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
  std::vector<std::shared_ptr<const kernels::PackedWeights>>* packed_;
  bool pack_;
  struct PackJob {
    kernels::WeightMatrix w;
    uint8_t* out;
  };
  std::vector<PackJob> jobs_;
  int64_t bytes_ = 0;
};

Status LoadDsaLayer(Loader& ld, const ModelConfig& c, int64_t l, DsaLayerWeights* L, int64_t* expert_bytes) {
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

}  // namespace

StatusOr<ModelWeights> LoadWeights(const GgufFile& gguf, const ModelConfig& c, bool pack) {
  ModelWeights w;
  Loader ld(gguf, &w.packed, pack);
  // The embedding table is read a row at a time (packed only when it is also the output).
  TANDEM_ASSIGN_OR_RETURN(w.token_embd, ld.Matrix("token_embd.weight", c.dim, c.vocab_size, false));
  const int64_t embd_bytes = ld.bytes();  // a lookup reads one row, not the table
  TANDEM_ASSIGN_OR_RETURN(w.output_norm, ld.Vector("output_norm.weight", c.dim));
  if (gguf.FindTensor("output.weight")) {
    TANDEM_ASSIGN_OR_RETURN(w.output, ld.Matrix("output.weight", c.dim, c.vocab_size));
  } else {
    w.output = w.token_embd;
    TANDEM_RETURN_IF_ERROR(ld.Pack(&w.output));
    w.tied_output = true;
  }
  if (c.is_dsa()) {
    int64_t expert_bytes = 0;
    w.dsa_layers.resize(size_t(c.n_layers));
    for (int64_t l = 0; l < c.n_layers; ++l) {
      TANDEM_RETURN_IF_ERROR(LoadDsaLayer(ld, c, l, &w.dsa_layers[size_t(l)], &expert_bytes));
    }
    // A decoded token reads n_experts_used of each MoE layer's n_experts.
    const int64_t unread = c.dsa.n_experts > 0 ? expert_bytes / c.dsa.n_experts * (c.dsa.n_experts - c.dsa.n_experts_used) : 0;
    w.matrix_bytes = ld.bytes() - embd_bytes + (w.tied_output ? embd_bytes : 0) - unread;
    ld.PackAll();
    return w;
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
  ld.PackAll();
  return w;
}

}  // namespace tandem
