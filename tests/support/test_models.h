// Builds preset models in memory for tests, and runs whole sequences through
// the forward pass with a chosen chunking.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/forward.h"
#include "model/presets.h"

namespace tandem::testing {

struct InMemoryModel {
  std::vector<uint8_t> bytes;  // must outlive model
  std::unique_ptr<Model> model;
};

// tweak, when given, edits the metadata before the file is serialized.
std::unique_ptr<InMemoryModel> MakePresetModel(const std::string& preset, TensorType type,
                                               uint64_t seed = 7, const std::string& arch = "llama",
                                               const std::function<void(GgufWriter&)>& tweak = {});

// Logits for every position of `tokens`, computed in chunks of chunk_size
// (0 = whole prompt at once). Uses its own page pool; dense attention unless
// `attention` says otherwise.
std::vector<float> RunSequence(const Model& model, ThreadPool& threads,
                               const std::vector<int32_t>& tokens, size_t chunk_size,
                               const AttentionOptions& attention = {});

std::vector<int32_t> PseudoRandomTokens(size_t n, int64_t vocab, uint32_t seed);

}  // namespace tandem::testing
