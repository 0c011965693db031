// A loaded model: the mapped GGUF file, its config, weight views, RoPE table
// and tokenizer. Immutable after Load,
// so any number of engines or threads may share one Model.
#pragma once

#include <memory>
#include <mutex>
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
  // Repack block-quantized matrices for the integer kernels (about the
  // file's bytes again, in this process). False for loads that never run the
  // forward pass (the router's tokenizer); the kernels then pack per call.
  bool pack_weights = true;
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
  // WeightsIdentity(gguf()), computed on first use (it reads every tensor's
  // bytes) and kept. Thread-safe.
  const std::string& weights_identity() const;

 private:
  std::unique_ptr<GgufFile> gguf_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatFormat chat_format_;
  mutable std::once_flag weights_identity_once_;
  mutable std::string weights_identity_;  // set once under weights_identity_once_
};

// Names everything in the file that decides the computation, so that a cache
// (a peer's handoff, the disk tier across restarts) is only used with the
// model that computed it. A keyed fingerprint (common/keyed_fingerprint.h),
// so two identities that differ can name what differs: "tensor data" (every
// tensor's name, type, shape and bytes), then "metadata <key>" for each key
// in key order (its type and value). Descriptive keys (general.name, the
// license, ...; model.cc says why each is left out) are not part of it, so a
// renamed file keeps its identity and its caches. At most about 16 KiB: the
// keys past that share one part, "other metadata".
std::string WeightsIdentity(const Model& model);
std::string WeightsIdentity(const GgufFile& file);

}  // namespace tandem
