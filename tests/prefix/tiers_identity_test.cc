// The disk tier (L3) under the weights identity: pages written by one model
// are never served to another, and a folder that holds another model's pages
// is refused with the key that differs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "model/model.h"
#include "prefix/tiers.h"
#include "runtime/engine.h"
#include "support/engine_ask.h"
#include "support/process.h"
#include "support/test_models.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::MakePresetModel;

std::vector<int32_t> Ask(Engine& e, const std::vector<int32_t>& prompt) { return testing::AskEngine(e, prompt, 4); }

// Issue 26, "hostile files": the identity that names L3's folder hashed the
// tensors only, so a copy of a model whose rope.freq_base was edited read the
// original's page files after a restart and decoded them: wrong tokens.
TEST(TiersIdentity, DiskPagesOfAnEditedModelAreNeverServed) {
  auto original = MakePresetModel("tiny", TensorType::kF32);
  auto edited = MakePresetModel("tiny", TensorType::kF32, 7, "llama", [](GgufWriter& w) {
    w.SetFloat32("llama.rope.freq_base", 500000.0f);
  });
  const std::string dir = testing::MakeTempDir();
  EngineOptions tiered;
  tiered.tiers.host_pages = 64;
  tiered.tiers.disk_dir = dir;
  tiered.tiers.disk_bytes = int64_t(1) << 30;
  const auto prompt = testing::PseudoRandomTokens(1000, original->model->config().vocab_size, 77);
  {
    auto engine = Engine::Create(*original->model, tiered);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    Ask(**engine, prompt);
  }  // shutdown finishes the disk writes: 15 pages
  std::vector<int32_t> want;
  {
    auto engine = Engine::Create(*edited->model, EngineOptions{});
    ASSERT_TRUE(engine.ok());
    want = Ask(**engine, prompt);
  }
  {
    auto engine = Engine::Create(*edited->model, tiered);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    EXPECT_EQ(Ask(**engine, prompt), want);
    EXPECT_EQ((*engine)->tier_stats().hit_tokens_l3, 0)
        << "the original's pages were served to the edited model";
  }
  // One folder per model. Give the edited model's folder the original's pages
  // and identity file, as a copy or a rename would: refused, naming the key.
  std::vector<fs::path> folders;
  for (const auto& d : fs::directory_iterator(dir)) folders.push_back(d.path());
  ASSERT_EQ(folders.size(), 2u);
  auto identity_of = [](const fs::path& folder) {
    std::ifstream in(folder / "identity");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string original_identity = WeightsIdentity(*original->model) + ";";
  if (identity_of(folders[1]).starts_with(original_identity)) std::swap(folders[0], folders[1]);
  ASSERT_TRUE(identity_of(folders[0]).starts_with(original_identity));
  fs::remove_all(folders[1]);
  fs::rename(folders[0], folders[1]);
  auto refused = Engine::Create(*edited->model, tiered);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "holds pages of another model or cache layout (they differ in metadata "
                "llama.rope.freq_base)"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace tandem
