// A loaded model: the mapped GGUF file, its config, weight views, RoPE table
// and tokenizer. Immutable after Load,
// so any number of engines or threads may share one Model.
#pragma once

#include <memory>
#include <string>

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

 private:
  std::unique_ptr<GgufFile> gguf_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// Names the weights (model name + a hash of every tensor), not the file:
// caches kept across restarts are only reused by the same weights.
std::string WeightsIdentity(const Model& model);

}  // namespace tandem
