#include "model/model.h"

#include <xxhash.h>

namespace tandem {

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path, const ModelLoadOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
  auto model = FromGguf(std::move(gguf), options);
  if (!model.ok()) return Status(model.status().code(), "'" + path + "': " + model.status().message());
  return model;
}

StatusOr<std::unique_ptr<Model>> Model::FromGguf(std::unique_ptr<GgufFile> gguf, const ModelLoadOptions& options) {
  auto m = std::unique_ptr<Model>(new Model());
  m->gguf_ = std::move(gguf);
  TANDEM_ASSIGN_OR_RETURN(m->config_, ReadModelConfig(*m->gguf_));
  TANDEM_ASSIGN_OR_RETURN(m->weights_, LoadWeights(*m->gguf_, m->config_));
  m->rope_ = std::make_unique<RopeTable>(m->config_);
  TANDEM_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromGguf(*m->gguf_));
  if (m->tokenizer_->vocab_size() != m->config_.vocab_size) {
    return DataLoss("tokenizer has " + std::to_string(m->tokenizer_->vocab_size()) +
                    " tokens but token_embd.weight has " + std::to_string(m->config_.vocab_size) +
                    " rows");
  }
  m->chat_format_ = options.chat_format ? *options.chat_format
                                        : ChatFormat::FromModel(m->gguf_->GetStringOr("tokenizer.chat_template", ""));
  if (options.chat_date) m->chat_format_.set_date(*options.chat_date);
  return m;
}

std::string WeightsIdentity(const Model& model) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const TensorInfo& t : model.gguf().tensors()) {
    XXH3_64bits_update(st, t.name.data(), t.name.size());
    XXH3_64bits_update(st, t.dims.data(), t.dims.size() * sizeof(t.dims[0]));
    XXH3_64bits_update(st, t.data, size_t(t.n_bytes));
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return model.config().name + ":" + std::to_string(h);
}

}  // namespace tandem
