// The llama family: llama and mistral (no biases, RoPE on pairs (2i, 2i+1)),
// qwen2 (Q/K/V biases, NeoX RoPE on (i, i + d/2)), and members that differ in
// a tensor or a step of the layer, each in a file of its own deriving from
// LlamaFamily (qwen3.cc: per-head RMS norms of Q and K).
//
// A layer: RMS norm; Q, K, V projections (+ biases); the member's query/key
// step; RoPE; K and V rows into the cache (and, under sparse attention, the
// derived indexer's keys); attention; output projection; residual; RMS norm;
// SwiGLU feed-forward; residual.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/arch/architecture.h"

namespace tandem {

struct LlamaLayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // empty when absent (qwen2 has them)
  std::vector<float> q_norm, k_norm;          // per-head norms, empty when the member has none (qwen3 has them)
  kernels::WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct LlamaWeights : ArchWeights {
  std::vector<LlamaLayerWeights> layers;
};

class LlamaFamily : public Architecture {
 public:
  explicit LlamaFamily(bool neox_rope) : neox_rope_(neox_rope) {}

  Status ReadConfig(const GgufFile& gguf, ModelConfig* config) const override;
  Status LoadLayers(WeightLoader& loader, const ModelConfig& config, ModelWeights* weights) const override;
  Status RegisterCache(const ModelConfig& config, CacheSpec* spec) const override;
  AttentionGeometry Geometry(const ModelConfig& config, const CacheSpec& spec) const override;
  std::unique_ptr<ArchLayers> MakeLayers(const ModelConfig& config) const override;
  double MatmulFlopsPerToken(const ModelConfig& config) const override;
  double AttentionFlopsPerEntry(const ModelConfig& config) const override;

  // A member's own tensors of layer `prefix` ("blk.N."), after the family's.
  virtual Status LoadMemberTensors(WeightLoader& loader, const ModelConfig& config, const std::string& prefix,
                                   LlamaLayerWeights* layer) const {
    return Status::Ok();
  }
  // A member's step on one token's projected queries (n_heads x head_dim)
  // and keys (n_kv_heads x head_dim), biases added, before RoPE.
  virtual void ShapeQueryKey(const ModelConfig& config, const LlamaLayerWeights& layer, float* q, float* k) const {}

 private:
  bool neox_rope_;
};

const Architecture& LlamaArchitecture();  // llama, mistral
const Architecture& Qwen2Architecture();

}  // namespace tandem
