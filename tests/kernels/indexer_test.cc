// Indexer scoring and top-k against a float64 reference, and across ISAs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/fp8.h"
#include "common/half.h"
#include "kernels/cpu.h"
#include "kernels/topk.h"

namespace tandem::kernels {
namespace {

constexpr int kDims = 128, kHeads = 4, kPositions = 300;

struct Keys {
  std::vector<uint8_t> bytes;  // pages of 64 rows, fp8 rows then scales, or bf16 rows
  std::vector<int32_t> pages;
  PagedRows rows;
};

Keys MakeKeys(bool fp8, uint32_t seed) {
  Keys k;
  const int64_t per_token = fp8 ? kDims + 4 : kDims * 2;
  const int n_pages = (kPositions + 63) / 64;
  k.bytes.resize(size_t(n_pages * 64 * per_token));
  for (int p = 0; p < n_pages; ++p) k.pages.push_back(n_pages - 1 - p);  // reversed page table
  k.rows = {k.bytes.data(), k.pages.data(), 64 * per_token, fp8 ? kDims : kDims * 2, 64,
            fp8 ? 64 * kDims : -1};
  uint32_t s = seed;
  std::vector<float> row(kDims);
  for (int pos = 0; pos < kPositions; ++pos) {
    if (pos % 50 == 7) {  // exact duplicate of the previous key: ties in the scores
      std::memcpy(k.rows.RowBytes(pos), k.rows.RowBytes(pos - 1), size_t(k.rows.row_bytes));
      if (fp8) *k.rows.Scale(pos) = *k.rows.Scale(pos - 1);
      continue;
    }
    for (auto& x : row) {
      s = s * 1664525u + 1013904223u;
      x = float(int(s >> 9) % 2001 - 1000) / 250.0f;
    }
    if (fp8) {
      QuantizeFp8Row(row.data(), kDims, k.rows.RowBytes(pos), k.rows.Scale(pos));
    } else {
      auto* h = reinterpret_cast<uint16_t*>(k.rows.RowBytes(pos));
      for (int i = 0; i < kDims; ++i) h[i] = FloatToBf16(row[size_t(i)]);
    }
  }
  return k;
}

double ReferenceScore(const std::vector<float>& q, const std::vector<float>& w, const Keys& k,
                      bool fp8, int pos) {
  double score = 0;
  for (int h = 0; h < kHeads; ++h) {
    double d = 0;
    for (int i = 0; i < kDims; ++i) {
      const double key = fp8 ? double(Fp8E4M3ToFloat(k.rows.RowBytes(pos)[i])) * *k.rows.Scale(pos)
                             : double(Bf16ToFloat(reinterpret_cast<const uint16_t*>(k.rows.RowBytes(pos))[i]));
      d += double(q[size_t(h * kDims + i)]) * key;
    }
    score += w[size_t(h)] * std::max(0.0, d);
  }
  return score;
}

TEST(Indexer, ScoresMatchReferenceAndTopKBreaksTiesByPosition) {
  std::vector<float> q(kHeads * kDims), w = {0.5f, 0.25f, 0.125f, 0.125f};
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 37 % 101) - 50) / 50.0f;
  for (bool fp8 : {true, false}) {
    const Keys k = MakeKeys(fp8, fp8 ? 3 : 4);
    std::vector<float> ref_scores;
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!IsaSupported(isa)) continue;
      SetIsa(isa);
      std::vector<float> scores(kPositions), scratch(size_t(IndexerScratchFloats(1, kDims)));
      const IndexerQueries query{q.data(), 0, w.data(), 0, kHeads, kDims, 1};
      Active().indexer_scores(query, k.rows, fp8, 0, kPositions, scores.data(), 0, scratch.data());
      if (ref_scores.empty()) {
        ref_scores = scores;
        for (int pos = 0; pos < kPositions; ++pos) {
          const double want = ReferenceScore(q, w, k, fp8, pos);
          EXPECT_NEAR(scores[size_t(pos)], want, 1e-4 * (1 + std::fabs(want))) << pos;
        }
      } else {
        EXPECT_EQ(0, std::memcmp(scores.data(), ref_scores.data(), scores.size() * 4)) << IsaName(isa);
      }
    }
    SetIsa(BestSupportedIsa());
    // Top-k vs a plain reference ordering: score descending, then position ascending.
    for (int64_t top : {1, 10, 57, 299, 300, 1000}) {
      std::vector<int32_t> got(kPositions);
      std::vector<float> work = ref_scores;  // SelectTopK overwrites its scores
      const int64_t n = SelectTopK(work.data(), kPositions, top, got.data());
      std::vector<int32_t> order(kPositions);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return ref_scores[size_t(a)] > ref_scores[size_t(b)]; });
      order.resize(size_t(std::min<int64_t>(top, kPositions)));
      std::sort(order.begin(), order.end());
      ASSERT_EQ(n, int64_t(order.size()));
      EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + n), order) << "top " << top;
    }
  }
}

TEST(Indexer, TiesAreBrokenTowardLowerPositions) {
  std::vector<float> scores = {1, 3, 3, 2, 3, 0};
  std::vector<int32_t> out(scores.size());
  ASSERT_EQ(SelectTopK(std::vector<float>(scores).data(), 6, 2, out.data()), 2);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 2);
  scores[1] = NAN;
  ASSERT_EQ(SelectTopK(std::vector<float>(scores).data(), 6, 3, out.data()), 3);
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 3), (std::vector<int32_t>{2, 3, 4}));
}

// Many queries in one call (tiled on AVX-512) give each query's scores bit
// for bit, on every ISA, for any head count, range and per-query weights.
TEST(Indexer, ManyQueriesInOneCallEqualOneQueryAtATime) {
  for (bool fp8 : {true, false}) {
    const Keys k = MakeKeys(fp8, fp8 ? 5 : 6);
    for (int heads : {1, 2, 3, 4}) {
      for (int n : {1, 2, 3, 5, 9}) {
        std::vector<float> q(size_t(n * heads * kDims)), w(size_t(n * heads));
        for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 53 % 211) - 105) / 60.0f;
        for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7 % 5) + 1) / 8.0f;
        const int64_t begin = 3 + n, end = kPositions - heads;
        std::vector<float> want(size_t(n) * kPositions), scratch(size_t(IndexerScratchFloats(n, kDims)));
        SetIsa(Isa::kScalar);
        for (int i = 0; i < n; ++i) {
          const IndexerQueries one{q.data() + i * heads * kDims, 0, w.data() + i * heads, 0, heads, kDims, 1};
          Active().indexer_scores(one, k.rows, fp8, begin, end, want.data() + i * kPositions, 0, scratch.data());
        }
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (!IsaSupported(isa)) continue;
          SetIsa(isa);
          std::vector<float> got(want.size(), -1.0f);
          const IndexerQueries all{q.data(), heads * kDims, w.data(), heads, heads, kDims, n};
          Active().indexer_scores(all, k.rows, fp8, begin, end, got.data(), kPositions, scratch.data());
          for (int i = 0; i < n; ++i) {
            EXPECT_EQ(0, std::memcmp(got.data() + i * kPositions, want.data() + i * kPositions,
                                     size_t(end - begin) * 4))
                << IsaName(isa) << " fp8 " << fp8 << " heads " << heads << " n " << n << " query " << i;
          }
        }
        SetIsa(BestSupportedIsa());
      }
    }
  }
}

// Top-k on every ISA against a comparison reference, on scores full of ties,
// signed zeros, infinities and NaNs, for short lists and long ones (where
// the AVX-512 kernel first bounds the candidates by a sample of the keys),
// including ones whose sample misleads (sorted scores, one repeated value).
TEST(Indexer, TopKEqualsTheComparisonOrderOnAdversarialScores) {
  uint32_t s = 12345;
  auto next = [&s] { return s = s * 1664525u + 1013904223u; };
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 1e-45f, -1e-45f};
  for (int trial = 0; trial < 48; ++trial) {
    const int64_t n = 1 + int64_t(next() % (trial % 2 ? 700 : 6000));
    std::vector<float> scores(static_cast<size_t>(n));
    for (auto& x : scores) {
      const uint32_t r = next();
      if (r % 4 == 0) x = specials[(r >> 8) % 9];
      else if (r % 4 == 1) x = float(int(r >> 20) % 7);  // many exact ties
      else std::memcpy(&x, &r, 4);                      // any bit pattern
    }
    if (trial % 8 == 2) std::sort(scores.begin(), scores.end(), [](float a, float b) { return a < b; });
    if (trial % 8 == 4) std::fill(scores.begin(), scores.end(), 2.5f);
    if (trial % 8 == 6) for (auto& x : scores) x = float(next() % 3);
    auto key = [&](int32_t i) { const float v = scores[size_t(i)]; return v != v ? -INFINITY : v; };
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
    for (int64_t top : {int64_t(1), int64_t(17), n / 3, n / 2, n - 1, n}) {
      if (top < 1 || top > n) continue;
      std::vector<int32_t> want(order.begin(), order.begin() + top);
      std::sort(want.begin(), want.end());
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (!IsaSupported(isa)) continue;
        SetIsa(isa);
        std::vector<float> work = scores;
        std::vector<int32_t> got(static_cast<size_t>(n));
        ASSERT_EQ(SelectTopK(work.data(), n, top, got.data()), top);
        EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + top), want)
            << IsaName(isa) << " n " << n << " top " << top << " trial " << trial;
      }
      SetIsa(BestSupportedIsa());
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
