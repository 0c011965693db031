#include "model/arch/qwen3.h"

#include "kernels/ops.h"
#include "model/arch/llama.h"

namespace tandem {
namespace {

class Qwen3 : public LlamaFamily {
 public:
  Qwen3() : LlamaFamily(/*neox_rope=*/true) {}

  Status LoadMemberTensors(WeightLoader& ld, const ModelConfig& c, const std::string& p,
                           LlamaLayerWeights* layer) const override {
    TANDEM_ASSIGN_OR_RETURN(layer->q_norm, ld.Vector(p + "attn_q_norm.weight", c.head_dim));
    TANDEM_ASSIGN_OR_RETURN(layer->k_norm, ld.Vector(p + "attn_k_norm.weight", c.head_dim));
    return Status::Ok();
  }

  // In place, each head alone: RmsNorm reads its whole input before it writes.
  void ShapeQueryKey(const ModelConfig& c, const LlamaLayerWeights& w, float* q, float* k) const override {
    for (int64_t h = 0; h < c.n_heads; ++h) {
      float* head = q + h * c.head_dim;
      kernels::RmsNorm(head, w.q_norm.data(), c.head_dim, c.rms_eps, head);
    }
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      float* head = k + h * c.head_dim;
      kernels::RmsNorm(head, w.k_norm.data(), c.head_dim, c.rms_eps, head);
    }
  }
};

}  // namespace

const Architecture& Qwen3Architecture() {
  static const Qwen3 arch;
  return arch;
}

}  // namespace tandem
