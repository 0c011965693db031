// One model architecture behind one interface: the GGUF keys it reads beyond
// the common ones, the tensors of its layers, the per-token cache buffers it
// keeps, how attention reads them, and its layer's forward computation. Each
// architecture is one file in this folder (llama.cc, qwen3.cc,
// deepseek32.cc); nothing outside model/arch/ asks which one a model is — it
// calls ModelConfig::arch. Adding one: docs/adding-an-architecture.md.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/cache_spec.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/weight_loader.h"

namespace tandem {

class ForwardPass;
struct ModelWeights;

// The tensors of an architecture's layers (ModelWeights::layers), read only
// by that architecture's own layer code.
struct ArchWeights {
  virtual ~ArchWeights() = default;
};

// How attention runs over the cache: the buffers it reads as keys and values,
// their head shape and scale, and the indexer that picks positions under
// sparse attention (the model's own, or tandem's derived from Q/K).
struct AttentionGeometry {
  CacheBufferId k = -1, v = -1;
  int64_t head_dim = 0, kv_heads = 0;
  float scale = 0;
  bool sparse = false;           // queries past top_k attend to the indexer's top-k
  bool derived_indexer = false;  // model/indexer.h over Q and K; else the layer writes index keys itself
  int index_heads = 0;
  int64_t index_dims = 0;
};

// One architecture's layers inside one ForwardPass; scratch of its own lives here.
class ArchLayers {
 public:
  virtual ~ArchLayers() = default;
  // Before each Run's layers, with its token count: sizes scratch.
  virtual void Reserve(ForwardPass& pass, int n_tokens) {}
  // Layer `layer` over the run's tokens: reads and updates the residual
  // stream (pass.acts().x) and writes the layer's rows of every registered
  // cache buffer for them. Each token's values depend on that token and its
  // cached context alone, in a fixed order (invariant 5).
  virtual void Forward(ForwardPass& pass, int layer) = 0;
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  // After the common keys (dim, layers, heads, FFN width, context, epsilon):
  // the architecture's own, the head shape and the RoPE (ReadRopeConfig).
  virtual Status ReadConfig(const GgufFile& gguf, ModelConfig* config) const = 0;
  // The layers' tensors into weights->layers; sets weights->ffn_type.
  virtual Status LoadLayers(WeightLoader& loader, const ModelConfig& config, ModelWeights* weights) const = 0;
  // Registers the per-token cache buffers (the registry is their only list)
  // for spec->attention, which the architecture may adjust (its own index dims).
  virtual Status RegisterCache(const ModelConfig& config, CacheSpec* spec) const = 0;
  virtual AttentionGeometry Geometry(const ModelConfig& config, const CacheSpec& spec) const = 0;
  virtual std::unique_ptr<ArchLayers> MakeLayers(const ModelConfig& config) const = 0;
  // A warning when `attention` is not the computation the model was trained with; "" when it is.
  virtual std::string AttentionAdvice(const ModelConfig& config, const AttentionOptions& attention) const {
    return "";
  }
  // For benchmarks' peak ratios: FLOPs (2 per multiply-add) of one token's
  // matmuls, and of its attention per attended position, over all layers.
  virtual double MatmulFlopsPerToken(const ModelConfig& config) const = 0;
  virtual double AttentionFlopsPerEntry(const ModelConfig& config) const = 0;
};

// The architecture of a GGUF `general.architecture` value, or null.
const Architecture* FindArchitecture(const std::string& name);
// The values FindArchitecture knows, for errors: "llama, mistral, ...".
std::string ArchitectureNames();

}  // namespace tandem
