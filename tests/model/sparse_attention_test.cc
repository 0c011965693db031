// Sparse attention (lightning indexer + top-k) through the whole forward pass.
#include <gtest/gtest.h>

#include <cstring>

#include "model/forward.h"
#include "support/paths.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using testing::MakePresetModel;
using testing::PseudoRandomTokens;
using testing::RunSequence;

AttentionOptions Sparse(int64_t top_k, CacheDType dtype) {
  AttentionOptions a;
  a.kind = AttentionKind::kSparse;
  a.top_k = top_k;
  a.index_k_dtype = dtype;
  return a;
}

TEST(SparseAttention, TopKCoveringTheContextIsBitwiseDense) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  ThreadPool threads(2);
  const auto tokens = PseudoRandomTokens(130, m->model->config().vocab_size, 4);
  const auto dense = RunSequence(*m->model, threads, tokens, 0);
  for (auto dtype : {CacheDType::kFp8E4M3Scaled, CacheDType::kBF16}) {
    for (int64_t k : {130, 2048}) {
      for (size_t chunk : {0, 1}) {
        const auto sparse = RunSequence(*m->model, threads, tokens, chunk, Sparse(k, dtype));
        ASSERT_EQ(sparse.size(), dense.size());
        EXPECT_EQ(0, std::memcmp(sparse.data(), dense.data(), dense.size() * 4))
            << CacheDTypeName(dtype) << " top-k " << k << " chunk " << chunk;
      }
    }
  }
}

TEST(SparseAttention, SmallTopKIsSparseAndChunkInvariant) {
  auto m = MakePresetModel("tiny", TensorType::kF16);
  ThreadPool threads(2);
  const auto tokens = PseudoRandomTokens(150, m->model->config().vocab_size, 8);
  const auto dense = RunSequence(*m->model, threads, tokens, 0);
  for (auto dtype : {CacheDType::kFp8E4M3Scaled, CacheDType::kBF16}) {
    const auto whole = RunSequence(*m->model, threads, tokens, 0, Sparse(16, dtype));
    // The first 16 positions see their whole context: identical to dense.
    const size_t vocab = size_t(m->model->config().vocab_size);
    EXPECT_EQ(0, std::memcmp(whole.data(), dense.data(), 16 * vocab * 4));
    EXPECT_NE(0, std::memcmp(whole.data(), dense.data(), whole.size() * 4)) << "top-k 16 must change later logits";
    // Chunk 1 takes the few-tokens path (positions scored by all threads);
    // larger chunks the per-thread path. Both must agree bit for bit.
    for (size_t chunk : {1, 7, 64}) {
      const auto got = RunSequence(*m->model, threads, tokens, chunk, Sparse(16, dtype));
      EXPECT_EQ(0, std::memcmp(got.data(), whole.data(), whole.size() * 4))
          << CacheDTypeName(dtype) << " chunk " << chunk;
    }
    ThreadPool one(1);
    const auto single = RunSequence(*m->model, one, tokens, 5, Sparse(16, dtype));
    EXPECT_EQ(0, std::memcmp(single.data(), whole.data(), whole.size() * 4)) << "1 thread";
  }
}

TEST(SparseAttention, Stories260KTopKTracksDenseOnRealText) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok());
  const Model& m = **model;
  ThreadPool threads(2);
  // Real text: the model's own story, repeated to 600 tokens.
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high. "
      "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do.";
  std::vector<int32_t> tokens = {1};
  while (tokens.size() < 600) {
    const auto more = m.tokenizer().Encode(story, false, false);
    tokens.insert(tokens.end(), more.begin(), more.end());
  }
  tokens.resize(600);
  const auto dense = RunSequence(m, threads, tokens, 0);
  const auto sparse = RunSequence(m, threads, tokens, 0, Sparse(64, CacheDType::kFp8E4M3Scaled));
  const size_t vocab = size_t(m.config().vocab_size);
  int agree = 0, counted = 0;
  for (size_t t = 64; t < tokens.size(); ++t, ++counted) {
    auto arg = [&](const std::vector<float>& l) {
      return std::max_element(l.begin() + long(t * vocab), l.begin() + long((t + 1) * vocab)) -
             (l.begin() + long(t * vocab));
    };
    agree += arg(dense) == arg(sparse);
  }
  std::cout << "[ sparse ] next-token argmax agreement with dense, top-k 64 of up to 600: " << agree
            << "/" << counted << "\n";
  EXPECT_GT(agree, counted * 9 / 10);
}

}  // namespace
}  // namespace tandem
