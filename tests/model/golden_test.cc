// The guard that makes a numerics bump impossible to forget (invariant 9).
//
// tests/model/golden/numerics.json pins, for a few prompts on each weight
// type, the tokens generated (greedy and sampled) and a digest of every
// prompt position's logits, with the numerics version they were made under.
// A change that moves any of them without bumping kNumericsVersion
// (src/model/numerics.h) fails here, naming what moved; so does a bump
// without new goldens. After a deliberate bump, regenerate them:
//   TANDEM_WRITE_GOLDEN=1 build/tests/tandem_tests --gtest_filter='NumericsGolden.*'
// Every ISA must give the goldens' bits (kernels/kernel_table.h): each case
// runs under every ISA this CPU supports.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/thread_pool.h"
#include "kernels/cpu.h"
#include "model/numerics.h"
#include "model/presets.h"
#include "runtime/generator.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

const char* GoldenPath() {
  static const std::string path = std::string(TANDEM_SOURCE_DIR) + "/tests/model/golden/numerics.json";
  return path.c_str();
}

struct GoldenCase {
  std::string name;
  std::string types;  // ParseMatrixTypes
  std::string arch = "llama";
  bool sparse = false;  // sparse attention, bf16 index-K, top-k 16
};

// A llama shape whose every row is whole 256-element super-blocks (so the
// K-quants apply to every matrix), two layers, cheap to build; and
// dsa-tiny for the deepseek32 path.
ModelPreset GoldenPreset(const std::string& arch) {
  if (arch == "deepseek32") return *FindPreset("dsa-tiny");
  return ModelPreset{"golden", 256, 2, 4, 2, 512, 1024, 4096};
}

std::vector<GoldenCase> Cases() {
  std::vector<GoldenCase> out;
  for (const char* t : {"f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q4_k_m", "q5_k", "q6_k"}) {
    out.push_back({std::string("llama-") + t, t});
  }
  out.push_back({"llama-f16-sparse", "f16", "llama", true});
  out.push_back({"deepseek32-q8_0", "q8_0", "deepseek32"});
  return out;
}

std::string Hex(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

// What one case computes: the prompt's logits digest and two generations.
Json Compute(const GoldenCase& c) {
  auto types = ParseMatrixTypes(c.types);
  EXPECT_TRUE(types.ok());
  auto writer = BuildRandomModel(GoldenPreset(c.arch), *types, 5, c.arch);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  const std::vector<uint8_t> bytes = writer->Serialize();
  auto gguf = GgufFile::Parse(bytes);
  EXPECT_TRUE(gguf.ok());
  auto model = Model::FromGguf(std::move(gguf).value());
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  AttentionOptions attention;
  if (c.sparse) {
    attention.kind = AttentionKind::kSparse;
    attention.top_k = 16;
    attention.index_k_dtype = CacheDType::kBF16;
  }
  ThreadPool threads(2);
  const std::vector<int32_t> prompt = testing::PseudoRandomTokens(48, m.config().vocab_size, 3);
  const std::vector<float> logits = testing::RunSequence(m, threads, prompt, 0, attention);
  Json out = {{"logits_digest", Hex(XXH3_64bits(logits.data(), logits.size() * sizeof(float)))}};
  auto spec = MakeCacheSpec(m.config(), attention);
  EXPECT_TRUE(spec.ok());
  for (const bool sampled : {false, true}) {
    Generator gen(m, *spec, threads, 256);
    GenerateOptions opt;
    opt.max_tokens = 12;
    opt.ignore_eos = true;
    if (sampled) {
      opt.sampling.temperature = 0.8f;
      opt.sampling.top_p = 0.95f;
      opt.sampling.seed = 11;
    }
    auto g = gen.Run(prompt, opt, nullptr);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    out[sampled ? "sampled" : "greedy"] = g.ok() ? g->tokens : std::vector<int32_t>{};
  }
  return out;
}

TEST(NumericsGolden, OutputsMatchTheGoldensOfThisNumericsVersion) {
  std::vector<kernels::Isa> isas;
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (kernels::IsaSupported(isa)) isas.push_back(isa);
  }
  const kernels::Isa best = kernels::ActiveIsa();
  Json computed = Json::object();
  for (const GoldenCase& c : Cases()) {
    for (kernels::Isa isa : isas) {
      kernels::SetIsa(isa);
      Json got = Compute(c);
      if (isa == isas.front()) {
        computed[c.name] = got;
      } else {
        EXPECT_EQ(got, computed[c.name]) << c.name << ": " << kernels::IsaName(isa) << " gives other bits than "
                                         << kernels::IsaName(isas.front()) << " (invariant 5)";
      }
    }
  }
  kernels::SetIsa(best);
  if (std::getenv("TANDEM_WRITE_GOLDEN") != nullptr) {
    std::ofstream(GoldenPath()) << Json{{"numerics_version", kNumericsVersion}, {"cases", computed}}.dump(1) << "\n";
    GTEST_SKIP() << "wrote " << GoldenPath() << " for numerics version " << kNumericsVersion;
  }
  std::ifstream in(GoldenPath());
  ASSERT_TRUE(in) << "no " << GoldenPath() << ": generate it with TANDEM_WRITE_GOLDEN=1";
  const Json golden = Json::parse(in, nullptr, false);
  ASSERT_FALSE(golden.is_discarded()) << GoldenPath() << " is not JSON";
  const int golden_version = golden.value("numerics_version", -1);
  std::vector<std::string> moved;
  for (const auto& [name, got] : computed.items()) {
    const Json want = golden["cases"].value(name, Json());
    for (const char* part : {"logits_digest", "greedy", "sampled"}) {
      if (want.is_null() || want.value(part, Json()) != got[part]) moved.push_back(name + " " + part);
    }
  }
  std::string list;
  for (const std::string& m : moved) list += "\n  " + m;
  if (golden_version == kNumericsVersion) {
    EXPECT_TRUE(moved.empty())
        << "these outputs changed, but kNumericsVersion is still " << kNumericsVersion
        << ": a change that moves a token's bits must bump it (src/model/numerics.h), so that verdicts across "
           "versions are judged as drift, not corruption; then regenerate the goldens (TANDEM_WRITE_GOLDEN=1)."
        << list;
  } else {
    ADD_FAILURE() << "kNumericsVersion is " << kNumericsVersion << " but the goldens were made under "
                  << golden_version << ": regenerate them with TANDEM_WRITE_GOLDEN=1"
                  << (moved.empty() ? " (and if nothing moved, the bump was not needed)" : "") << list;
  }
}

// The identity's parts and id: every part moves the id, and a JSON round trip keeps it.
TEST(NumericsIdentity, EveryPartMovesTheIdAndJsonRoundTrips) {
  NumericsIdentity a;
  a.version = kNumericsVersion;
  a.weights = "0123456789abcdef";
  a.attention = "attention=dense";
  a.cache = "k:f16,v:f16";
  a.chat_format = "builtin:llama2";
  std::set<std::string> ids = {a.Id()};
  for (int i = 0; i < 7; ++i) {
    NumericsIdentity b = a;
    switch (i) {
      case 0: b.version += 1; break;
      case 1: b.kernel_variant = "debug-ulp"; break;
      case 2: b.weights[0] = '1'; break;
      case 3: b.attention = "attention=sparse:top_k=64"; break;
      case 4: b.cache = "k:bf16,v:bf16"; break;
      case 5: b.chat_format = "builtin:chatml"; break;
      case 6: b.mixed = true; break;
    }
    EXPECT_TRUE(ids.insert(b.Id()).second) << "part " << i << " did not move the id";
    EXPECT_NE(a.Differences(b), "nothing");
    auto back = NumericsIdentity::FromJson(b.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, b);
  }
  EXPECT_EQ(a.Differences(a), "nothing");
  EXPECT_EQ(a.Id().rfind("n" + std::to_string(kNumericsVersion) + "-", 0), 0u) << a.Id();
}

}  // namespace
}  // namespace tandem
