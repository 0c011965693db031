// A loaded model: the mapped GGUF file, its config, weight views and RoPE
// table, plus the cache buffers the forward pass needs. Immutable after Load,
// so any number of engines or threads may share one Model.
#pragma once

#include <memory>
#include <string>

#include "cache/registry.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/rope.h"
#include "model/tokenizer.h"
#include "model/weights.h"

namespace tandem {

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  static StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<GgufFile> gguf);

  const GgufFile& gguf() const { return *gguf_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const RopeTable& rope() const { return *rope_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // The per-token cache buffers this model's attention reads and writes.
  const CacheBufferRegistry& cache_registry() const { return registry_; }
  CacheBufferId k_buffer() const { return k_buffer_; }
  CacheBufferId v_buffer() const { return v_buffer_; }

 private:
  std::unique_ptr<GgufFile> gguf_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<Tokenizer> tokenizer_;
  CacheBufferRegistry registry_;
  CacheBufferId k_buffer_ = -1, v_buffer_ = -1;
};

}  // namespace tandem
