#include "support/test_models.h"

#include <gtest/gtest.h>

namespace tandem::testing {

std::unique_ptr<InMemoryModel> MakePresetModel(const std::string& preset, TensorType type,
                                               uint64_t seed, const std::string& arch,
                                               const std::function<void(GgufWriter&)>& tweak) {
  auto p = FindPreset(preset);
  EXPECT_TRUE(p.ok());
  auto writer = BuildRandomModel(*p, type, seed, arch);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  if (tweak) tweak(*writer);
  auto m = std::make_unique<InMemoryModel>();
  m->bytes = writer->Serialize();
  auto gguf = GgufFile::Parse(m->bytes);
  EXPECT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto model = Model::FromGguf(std::move(gguf).value());
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  m->model = std::move(model).value();
  return m;
}

std::vector<float> RunSequence(const Model& model, ThreadPool& threads,
                               const std::vector<int32_t>& tokens, size_t chunk_size,
                               const AttentionOptions& attention) {
  const int64_t n_pages = int64_t(tokens.size() + kPageTokens - 1) / kPageTokens;
  auto spec = MakeCacheSpec(model.config(), attention);
  EXPECT_TRUE(spec.ok());
  PagePool pool(spec->registry, int(model.config().n_layers), n_pages);
  auto pages = pool.Allocate(n_pages);
  EXPECT_TRUE(pages.ok());
  ForwardPass fwd(model, *spec, threads);
  std::vector<float> logits;
  if (chunk_size == 0) chunk_size = tokens.size();
  for (size_t start = 0; start < tokens.size(); start += chunk_size) {
    const size_t len = std::min(chunk_size, tokens.size() - start);
    SequenceChunk c{std::span<const int32_t>(tokens).subspan(start, len), int64_t(start), *pages,
                    true};
    Status st = fwd.Run({&c, 1}, pool, &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  pool.Release(*pages);
  EXPECT_EQ(pool.free_pages(), pool.total_pages());
  return logits;
}

std::vector<int32_t> PseudoRandomTokens(size_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t(n);
  uint32_t s = seed * 747796405u + 2891336453u;
  for (auto& x : t) {
    s = s * 1664525u + 1013904223u;
    x = int32_t((s >> 8) % uint32_t(vocab));
  }
  return t;
}

}  // namespace tandem::testing
