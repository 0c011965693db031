// The weights identity (model/model.h) covers everything in a file that
// decides the computation, leaves out what only describes the model, names
// the key that differs, and stays short whatever the file declares.
#include <gtest/gtest.h>

#include "common/keyed_fingerprint.h"
#include "model/model.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using testing::MakePresetModel;

std::string IdentityWith(const std::function<void(GgufWriter&)>& tweak) {
  return WeightsIdentity(*MakePresetModel("tiny", TensorType::kF32, 7, "llama", tweak)->model);
}

// Issue 26, "hostile files": the identity hashed tensor names, shapes and
// bytes only, so a file whose rope.freq_base was edited shared the original's
// disk-tier pages and passed the engines' handshake, and served wrong tokens.
TEST(WeightsIdentity, AnEditedRopeFreqBaseIsAnotherModelAndTheKeyIsNamed) {
  const std::string original = IdentityWith({});
  const std::string edited =
      IdentityWith([](GgufWriter& w) { w.SetFloat32("llama.rope.freq_base", 500000.0f); });
  EXPECT_NE(original, edited);
  EXPECT_EQ(DescribeDifferingParts(original, edited), "metadata llama.rope.freq_base");
}

// Every key the computation reads, and any key tandem does not know (it may
// matter to the next version), counts; one edit names exactly its key.
TEST(WeightsIdentity, EveryKeyThatChangesTheComputationCounts) {
  const std::string original = IdentityWith({});
  const std::vector<std::pair<std::string, std::function<void(GgufWriter&)>>> edits = {
      {"llama.attention.layer_norm_rms_epsilon",
       [](GgufWriter& w) { w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-6f); }},
      {"llama.rope.scaling.type",
       [](GgufWriter& w) { w.SetString("llama.rope.scaling.type", "none"); }},
      {"tokenizer.ggml.add_bos_token",
       [](GgufWriter& w) { w.SetBool("tokenizer.ggml.add_bos_token", false); }},
      {"tokenizer.chat_template",
       [](GgufWriter& w) {
         std::string edited = kPresetChatTemplate;
         edited.append("\n");
         w.SetString("tokenizer.chat_template", edited);
       }},
      {"llama.future_key", [](GgufWriter& w) { w.SetUint32("llama.future_key", 1); }},
      // The same value in another type is another file: conservative, and cheap.
      {"llama.rope.freq_base",
       [](GgufWriter& w) {
         GgufValue v;
         v.type = GgufType::kFloat64;
         v.f = 10000.0;
         w.Set("llama.rope.freq_base", v);
       }},
  };
  for (const auto& [key, edit] : edits) {
    const std::string edited = IdentityWith(edit);
    EXPECT_NE(edited, original) << key;
    EXPECT_EQ(DescribeDifferingParts(original, edited), "metadata " + key);
  }
}

// What only describes a model (its name, authors, license, provenance) leaves
// the identity alone: a renamed file keeps its caches and its peers.
TEST(WeightsIdentity, DescriptiveMetadataIsNotPartOfIt) {
  const std::string original = IdentityWith({});
  const std::string renamed = IdentityWith([](GgufWriter& w) {
    w.SetString("general.name", "someone else's name");
    w.SetString("general.author", "someone");
    w.SetString("general.license", "mit");
    w.SetString("general.source.url", "https://example.com/model");
    w.SetString("general.base_model.0.name", "base");
    w.SetStringArray("general.tags", {"text-generation"});
    w.SetUint32("general.file_type", 1);
  });
  EXPECT_EQ(renamed, original);
}

// A tensor's type decides how its bytes are read: F16 and BF16 tensors of
// the same shape and bytes are other weights.
TEST(WeightsIdentity, ATensorsTypeIsPartOfIt) {
  auto identity = [](TensorType type) {
    GgufWriter w;
    EXPECT_TRUE(w.AddTensor("w", type, {4}, std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}).ok());
    const std::vector<uint8_t> bytes = w.Serialize();
    auto g = GgufFile::Parse(bytes);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return g.ok() ? WeightsIdentity(**g) : "";
  };
  EXPECT_NE(identity(TensorType::kF16), identity(TensorType::kBF16));
  EXPECT_EQ(DescribeDifferingParts(identity(TensorType::kF16), identity(TensorType::kBF16)),
            "tensor data");
}

// The identity travels in every Hello (1 MiB a string at most): a file with
// thousands of keys, or one very long key, still gives a short identity, and
// a change past the listed keys still changes it.
TEST(WeightsIdentity, StaysShortWhateverTheFileDeclares) {
  auto identity = [](uint32_t last_value) {
    GgufWriter w;
    for (int k = 0; k < 5000; ++k) w.SetUint32("key." + std::to_string(k), 0);
    w.SetString(std::string(100000, 'k'), "a long key");
    w.SetUint32("zzz.last", last_value);
    const std::vector<uint8_t> bytes = w.Serialize();
    auto g = GgufFile::Parse(bytes);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return g.ok() ? WeightsIdentity(**g) : "";
  };
  const std::string a = identity(1), b = identity(2);
  EXPECT_LE(a.size(), size_t(17) << 10);
  EXPECT_NE(a, b);
  EXPECT_EQ(DescribeDifferingParts(a, b), "other metadata");
}

}  // namespace
}  // namespace tandem
