// Model hyper-parameters read from GGUF metadata, validated once at load.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "model/arch/deepseek32_config.h"
#include "model/gguf.h"

namespace tandem {

class Architecture;  // model/arch/architecture.h

enum class RopeScaling { kNone, kLinear, kYarn };

struct ModelConfig {
  std::string architecture = "llama";  // general.architecture: llama, mistral, qwen2, qwen3, deepseek32
  std::string name;
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  int64_t context_length = 0;
  float rms_eps = 1e-5f;
  // RoPE
  bool rope_neox = false;      // qwen2, qwen3: rotate (i, i + d/2); llama: (2i, 2i+1)
  int64_t rope_dims = 0;       // dimensions rotated per head (<= head_dim)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_factor = 1.0;
  int64_t rope_original_context = 0;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  // YaRN's magnitude correction goes into the attention scale (deepseek32),
  // not into the rotation (everyone else).
  bool yarn_scales_attention = false;

  // deepseek32 only (model/arch/deepseek32.cc): MLA, the lightning indexer and the experts.
  // head_dim is then the query/key head (nope + rope dims), n_kv_heads 1 and
  // ffn_dim the leading dense layers' width.
  DsaConfig dsa;

  // What computes it (model/arch/). REQUIRES: a known architecture (ReadModelConfig checks).
  const Architecture& arch() const;
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

StatusOr<ModelConfig> ReadModelConfig(const GgufFile& gguf);
// The RoPE keys (<arch>.rope.*), for architectures' ReadConfig: head_dim must
// be set (rope.dimension_count defaults to it).
Status ReadRopeConfig(const GgufFile& gguf, ModelConfig* config);
// An <arch>.<suffix> key that must lie in [1, 2^31].
Status ReadPositive(const GgufFile& gguf, const std::string& suffix, const ModelConfig& config, int64_t* out);

}  // namespace tandem
