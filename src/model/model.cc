#include "model/model.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <vector>

#include "common/keyed_fingerprint.h"

namespace tandem {
namespace {

// Per-key parts are listed while the identity stays under this; it travels in
// every Hello (at most 1 MiB a string) and names the disk tier's folder.
constexpr size_t kMaxListedIdentityBytes = 16 << 10;

// Metadata that describes a model without changing what it computes: what it
// is called, who made, tuned or quantized it, where it came from and under
// which license — a renamed or re-attributed file keeps its identity and its
// caches. general.file_type (the type most tensors have, for display) and
// general.alignment (where the file puts tensor data) say nothing the tensor
// part does not hash exactly. Anything not listed, including keys tandem does
// not know yet, counts: the architecture, hyperparameters, RoPE and its
// scaling, norms, experts, and every tokenizer.* key with the chat template
// (they decide the tokens).
bool IsDescriptiveMetadata(std::string_view key) {
  static constexpr std::string_view kKeys[] = {
      "general.name",         "general.basename",    "general.finetune",     "general.version",
      "general.size_label",   "general.description", "general.author",       "general.organization",
      "general.quantized_by", "general.url",         "general.doi",          "general.uuid",
      "general.repo_url",     "general.license",     "general.license.name", "general.license.link",
      "general.tags",         "general.languages",   "general.datasets",     "general.file_type",
      "general.alignment"};
  // Provenance: the models and datasets it was derived from.
  static constexpr std::string_view kPrefixes[] = {"general.source.", "general.base_model.",
                                                   "general.dataset."};
  for (std::string_view k : kKeys) {
    if (key == k) return true;
  }
  for (std::string_view p : kPrefixes) {
    if (key.starts_with(p)) return true;
  }
  return false;
}

void HashBytes(XXH3_state_t* st, const void* data, size_t n) { XXH3_64bits_update(st, data, n); }

template <typename T>
void HashPod(XXH3_state_t* st, T v) {
  HashBytes(st, &v, sizeof(v));
}

// The type and the value as the file stores them: a float32 by its 4 bytes,
// an integer by its 64-bit value, a string or an array with its length first.
void HashValue(XXH3_state_t* st, const GgufValue& v) {
  HashPod(st, uint32_t(v.type));
  switch (v.type) {
    case GgufType::kFloat32:
      HashPod(st, float(v.f));
      return;
    case GgufType::kFloat64:
      HashPod(st, v.f);
      return;
    case GgufType::kString:
      HashPod(st, uint64_t(v.s.size()));
      HashBytes(st, v.s.data(), v.s.size());
      return;
    case GgufType::kArray:
      HashPod(st, uint32_t(v.array_type));
      HashPod(st, uint64_t(v.array.size()));
      for (const GgufValue& e : v.array) HashValue(st, e);
      return;
    default:  // every integer type and bool: v.u holds its 64-bit value
      HashPod(st, v.u);
      return;
  }
}

// Every tensor in name order (the file's order decides nothing): name, type,
// shape and bytes.
uint64_t TensorsDigest(const GgufFile& file) {
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo& t : file.tensors()) tensors.push_back(&t);
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const TensorInfo* t : tensors) {
    HashPod(st, uint64_t(t->name.size()));
    HashBytes(st, t->name.data(), t->name.size());
    HashPod(st, uint32_t(t->type));
    HashPod(st, uint64_t(t->dims.size()));
    HashBytes(st, t->dims.data(), t->dims.size() * sizeof(t->dims[0]));
    HashBytes(st, t->data, size_t(t->n_bytes));
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::string Hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)h);
  return buf;
}

}  // namespace

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
  TANDEM_ASSIGN_OR_RETURN(m->weights_, LoadWeights(*m->gguf_, m->config_, options.pack_weights));
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

std::string WeightsIdentity(const Model& model) { return model.weights_identity(); }

const std::string& Model::weights_identity() const {
  std::call_once(weights_identity_once_, [this] { weights_identity_ = WeightsIdentity(*gguf_); });
  return weights_identity_;
}

std::string WeightsIdentity(const GgufFile& file) {
  std::string identity;
  AppendFingerprintPart(&identity, "tensor data", Hex(TensorsDigest(file)));
  // Keys past the budget share one part, so the identity always fits the
  // handshake's string limit whatever the file declares.
  XXH3_state_t* rest = nullptr;
  for (const auto& [key, value] : file.metadata()) {  // a std::map: sorted by key
    if (IsDescriptiveMetadata(key)) continue;
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    HashValue(st, value);
    const std::string digest = Hex(XXH3_64bits_digest(st));
    XXH3_freeState(st);
    const std::string name = "metadata " + key;  // never "tensor data" or "other metadata"
    if (!rest && identity.size() + FingerprintPartBytes(name, digest) <= kMaxListedIdentityBytes) {
      AppendFingerprintPart(&identity, name, digest);
      continue;
    }
    if (!rest) {
      rest = XXH3_createState();
      XXH3_64bits_reset(rest);
    }
    HashPod(rest, uint64_t(key.size()));
    HashBytes(rest, key.data(), key.size());
    HashBytes(rest, digest.data(), digest.size());
  }
  if (rest) {
    AppendFingerprintPart(&identity, "other metadata", Hex(XXH3_64bits_digest(rest)));
    XXH3_freeState(rest);
  }
  return identity;
}

}  // namespace tandem
