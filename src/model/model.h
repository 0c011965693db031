// A loaded model: the mapped GGUF file, its config, weight views, RoPE table
// and tokenizer. Immutable after Load,
// so any number of engines or threads may share one Model.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/chat_template.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/rope.h"
#include "model/tokenizer.h"
#include "model/weights.h"

namespace tandem {

struct ModelLoadOptions {
  // Renders chats instead of the GGUF's tokenizer.chat_template (--chat-template).
  std::optional<ChatFormat> chat_format;
  // The day strftime_now() prints (--chat-date); unset: ChatFormat::kDefaultDate.
  std::optional<int64_t> chat_date;
};

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& path, const ModelLoadOptions& options = {});
  static StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<GgufFile> gguf,
                                                   const ModelLoadOptions& options = {});

  const GgufFile& gguf() const { return *gguf_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const RopeTable& rope() const { return *rope_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // How chats become prompts: the model's template, or the override it was loaded with.
  const ChatFormat& chat_format() const { return chat_format_; }

 private:
  std::unique_ptr<GgufFile> gguf_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatFormat chat_format_;
};

// Names the weights (model name + a hash of every tensor), not the file:
// caches kept across restarts are only reused by the same weights.
std::string WeightsIdentity(const Model& model);

}  // namespace tandem
