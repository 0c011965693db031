// The deepseek32 forward pass (model/arch/deepseek32_layer.cc) against the float64
// reference (support/dsa_reference.h) on dsa-tiny, dense and sparse, and
// the invariances the oracle relies on: chunking and batching never change
// a bit, and top-k at or above the context is dense attention bitwise.
#include <gtest/gtest.h>

#include <algorithm>

#include <iostream>

#include "model/forward.h"
#include "support/dsa_reference.h"
#include "support/reference_model.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using testing::MakePresetModel;
using testing::PseudoRandomTokens;
using testing::RunSequence;

AttentionOptions Options(AttentionKind kind, int64_t top_k, CacheDType kv, CacheDType index_k) {
  AttentionOptions a;
  a.kind = kind;
  a.top_k = top_k;
  a.kv_dtype = kv;
  a.index_k_dtype = index_k;
  return a;
}

// The normalized error of the forward pass under `options` against `want`.
double ErrorAgainst(const Model& model, ThreadPool& threads, const std::vector<int32_t>& tokens, AttentionKind kind,
                    CacheDType kv, CacheDType index_k, const std::vector<double>& want) {
  return testing::NormalizedError(RunSequence(model, threads, tokens, 0, Options(kind, 64, kv, index_k)), want);
}

TEST(DsaForward, MatchesTheFloat64Reference) {
  using enum AttentionKind;
  for (TensorType type : {TensorType::kF32, TensorType::kQ8_0}) {
    auto m = MakePresetModel("dsa-tiny", type);
    const Model& model = *m->model;
    ThreadPool threads(2);
    const auto tokens = PseudoRandomTokens(100, model.config().vocab_size, 3);
    const testing::DsaReference ref(model.gguf());
    // Dense: every query attends to its whole context.
    const auto dense_want = ref.Forward(tokens, 1 << 30);
    const double dense = ErrorAgainst(model, threads, tokens, kDense, CacheDType::kF32, CacheDType::kBF16, dense_want);
    const double dense_f16 = ErrorAgainst(model, threads, tokens, kDense, CacheDType::kF16, CacheDType::kBF16, dense_want);
    // Q8_0 multiplies 8-bit activations; the reference quantizes them by the
    // same rule, but an ulp next to a rounding boundary moves one a step
    // (forward_test.cc's kQuantizedBound says why), and here such a step can
    // also flip a routed expert or a top-k pick: measured 0.08 dense, 0.017
    // sparse (llama-shaped tiny Q8_0 matches to 1e-7, ForwardReference).
    const double bound = type == TensorType::kQ8_0 ? 0.15 : 1e-5;
    EXPECT_LT(dense, bound);
    EXPECT_LT(dense_f16, std::max(5e-3, bound));
    // Sparse: positions past 64 attend to the indexer's top 64, scored with
    // the keys as the bf16 index-K holds them.
    const auto sparse_want = ref.Forward(tokens, 64, true);
    const double sparse_bf16 =
        ErrorAgainst(model, threads, tokens, kSparse, CacheDType::kF32, CacheDType::kBF16, sparse_want);
    const double sparse_fp8 =
        ErrorAgainst(model, threads, tokens, kSparse, CacheDType::kF32, CacheDType::kFp8E4M3Scaled, sparse_want);
    EXPECT_LT(sparse_bf16, bound);
    // fp8 keys pick other positions where scores nearly tie (dsa-tiny's 4
    // index heads make many exactly 0): near the reference, not at it.
    EXPECT_LT(sparse_fp8, 0.2);
    EXPECT_GT(ErrorAgainst(model, threads, tokens, kDense, CacheDType::kF32, CacheDType::kBF16, sparse_want),
              sparse_bf16)
        << "dense attention should be farther from the sparse reference than sparse attention is";
    std::cout << "[ reference ] dsa-tiny " << TensorTypeName(type) << ": dense " << dense << " (f32 latent), "
              << dense_f16 << " (f16); sparse top-64 " << sparse_bf16 << " (bf16 index-K), " << sparse_fp8
              << " (fp8)\n";
  }
}

// DeepSeek's YaRN (factor 4 over an original context of 32, so the
// interpolated and extrapolated ranges both show within 100 tokens).
TEST(DsaForward, WithYarnMatchesTheFloat64Reference) {
  auto m = MakePresetModel("dsa-tiny", TensorType::kF32, 7, "llama", [](GgufWriter& w) {
    w.SetString("deepseek32.rope.scaling.type", "yarn");
    w.SetFloat32("deepseek32.rope.scaling.factor", 4.0f);
    w.SetUint32("deepseek32.rope.scaling.original_context_length", 32);
    w.SetFloat32("deepseek32.rope.scaling.yarn_log_multiplier", 0.1f);
  });
  ThreadPool threads(2);
  const auto tokens = PseudoRandomTokens(100, m->model->config().vocab_size, 5);
  const testing::DsaReference ref(m->model->gguf());
  const double dense = ErrorAgainst(*m->model, threads, tokens, AttentionKind::kDense, CacheDType::kF32,
                                    CacheDType::kBF16, ref.Forward(tokens, 1 << 30));
  const double sparse = ErrorAgainst(*m->model, threads, tokens, AttentionKind::kSparse, CacheDType::kF32,
                                     CacheDType::kBF16, ref.Forward(tokens, 64, true));
  EXPECT_LT(dense, 1e-5);
  EXPECT_LT(sparse, 1e-5);
  std::cout << "[ reference ] dsa-tiny with YaRN: dense " << dense << ", sparse top-64 " << sparse << "\n";
}

TEST(DsaForward, ChunkingNeverChangesABitDenseOrSparse) {
  auto m = MakePresetModel("dsa-tiny", TensorType::kF32);
  ThreadPool threads(2);
  const auto tokens = PseudoRandomTokens(150, m->model->config().vocab_size, 9);
  for (AttentionKind kind : {AttentionKind::kDense, AttentionKind::kSparse}) {
    const auto options = Options(kind, 64, CacheDType::kF16, CacheDType::kFp8E4M3Scaled);
    const auto whole = RunSequence(*m->model, threads, tokens, 0, options);
    for (size_t chunk : {size_t(1), size_t(7), size_t(64)}) {
      EXPECT_EQ(RunSequence(*m->model, threads, tokens, chunk, options), whole)
          << "chunk " << chunk << (kind == AttentionKind::kSparse ? " sparse" : " dense");
    }
  }
}

// A query whose context is within top-k attends to every position (in the
// dense order, so bitwise dense); one past it drops a position.
TEST(DsaForward, TopKAtOrAboveTheContextIsDenseBitwise) {
  auto m = MakePresetModel("dsa-tiny", TensorType::kF32);
  ThreadPool threads(2);
  const auto tokens = PseudoRandomTokens(120, m->model->config().vocab_size, 4);
  const auto dense = RunSequence(*m->model, threads, tokens, 0,
                                 Options(AttentionKind::kDense, 64, CacheDType::kF16, CacheDType::kFp8E4M3Scaled));
  const size_t vocab = size_t(m->model->config().vocab_size);
  for (int64_t top_k : {120, 119, 64}) {
    auto options = Options(AttentionKind::kSparse, top_k, CacheDType::kF16, CacheDType::kFp8E4M3Scaled);
    const auto sparse = RunSequence(*m->model, threads, tokens, 0, options);
    ASSERT_EQ(sparse.size(), dense.size());
    for (size_t t = 0; t < tokens.size(); ++t) {
      const bool same = std::equal(sparse.begin() + t * vocab, sparse.begin() + (t + 1) * vocab, dense.begin() + t * vocab);
      EXPECT_EQ(same, int64_t(t) < top_k) << "top-k " << top_k << ", position " << t;
    }
  }
}

}  // namespace
}  // namespace tandem
