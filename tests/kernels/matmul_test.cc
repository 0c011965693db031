// Every ISA's kernels against the scalar reference: bitwise equal (the
// canonical reduction order), and close to a float64 dot product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/quant_dot.h"
#include "kernels/weight_row.h"
#include "model/presets.h"
#include "support/isas.h"

namespace tandem::kernels {
namespace {

std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(int32_t(s >> 8) % 20001 - 10000) / 5000.0f;
  }
  return v;
}

struct Case {
  TensorType file_type;
  WeightType kernel_type;
};

using testing::IsaRestorer;
using testing::SupportedIsas;

TEST(MatMul, AllIsasBitwiseEqualAndAccurate) {
  IsaRestorer restore;
  const Case cases[] = {{TensorType::kF32, WeightType::kF32},
                        {TensorType::kF16, WeightType::kF16},
                        {TensorType::kBF16, WeightType::kBF16},
                        {TensorType::kQ8_0, WeightType::kQ8_0},
                        {TensorType::kQ4_0, WeightType::kQ4_0},
                        {TensorType::kQ5_0, WeightType::kQ5_0},
                        {TensorType::kQ4_K, WeightType::kQ4_K},
                        {TensorType::kQ5_K, WeightType::kQ5_K},
                        {TensorType::kQ6_K, WeightType::kQ6_K}};
  for (const Case& c : cases) {
    for (int64_t cols : {16, 32, 64, 96, 17, 3, 45, 172, 256, 512}) {
      uint64_t block = 1, block_bytes = 1;
      ASSERT_TRUE(TensorTypeBlock(uint32_t(c.file_type), &block, &block_bytes));
      if (uint64_t(cols) % block != 0) continue;
      for (int rows : {1, 3, 4, 9, 13, 35}) {  // 35: three groups of the packed kernels
        for (int n_tok : {1, 2, 3, 4, 5, 8, 13, 70}) {  // 70: past the 64-token block
          const auto wf = Values(size_t(rows * cols), uint32_t(cols * 31 + rows));
          const auto bytes = EncodeTensor(wf, c.file_type);
          WeightMatrix w{c.kernel_type, bytes.data(), rows, cols, bytes.size() / size_t(rows)};
          const auto x = Values(size_t(n_tok * cols), uint32_t(n_tok + 7));
          std::vector<float> ref;
          for (Isa isa : SupportedIsas()) {
            SetIsa(isa);
            std::vector<float> y(size_t(n_tok * rows), -1.0f);
            Active().matmul_rows(w, x.data(), cols, n_tok, y.data(), rows, 0, rows);
            if (ref.empty()) {
              ref = y;
              // Accuracy against float64 over the exactly-decoded weights and,
              // for block-quantized weights, the activations as quantized
              // (quant_dot.h's step 1): only the kernels' rounding is left.
              // Against the unquantized activations the error is at most
              // half a quantization step per element.
              const int block = UsesIntegerDot(c.kernel_type) ? ActBlockFor(c.kernel_type) : 0;
              std::vector<double> xq(x.begin(), x.end()), step(x.size(), 0.0);
              if (block > 0) {
                std::vector<int8_t> q(static_cast<size_t>(block));
                std::vector<int16_t> sums(static_cast<size_t>(block / 16));
                for (size_t b0 = 0; b0 < x.size(); b0 += size_t(block)) {
                  float da = 0;
                  QuantizeActBlock(x.data() + b0, block, q.data(), &da, sums.data());
                  for (int k = 0; k < block; ++k) {
                    xq[b0 + size_t(k)] = double(q[size_t(k)]) * da;
                    step[b0 + size_t(k)] = da;
                  }
                }
              }
              for (int t = 0; t < n_tok; ++t) {
                for (int r = 0; r < rows; ++r) {
                  double d = 0, mag = 0, exact = 0, bound = 0;
                  for (int64_t k = 0; k < cols; ++k) {
                    const size_t i = size_t(t * cols + k);
                    const double wk = WeightAt(c.kernel_type, bytes.data() + size_t(r) * w.row_bytes, k);
                    d += wk * xq[i];
                    mag += std::fabs(wk * xq[i]);
                    exact += wk * x[i];
                    bound += std::fabs(wk) * step[i] * 0.5001;
                  }
                  const double got = y[size_t(t * rows + r)];
                  EXPECT_NEAR(got, d, 1e-6 * mag + 1e-30) << int(c.kernel_type) << " cols " << cols;
                  EXPECT_NEAR(got, exact, bound + 2e-6 * mag + 1e-30) << int(c.kernel_type) << " cols " << cols;
                }
              }
            } else {
              ASSERT_EQ(0, std::memcmp(ref.data(), y.data(), ref.size() * 4))
                  << IsaName(isa) << " differs from scalar: type " << int(c.kernel_type)
                  << " cols " << cols << " rows " << rows << " tokens " << n_tok;
            }
          }
        }
      }
    }
  }
}

// A token's outputs are the same bits in a batch of 9 as alone, and with the
// rows split between two calls (r0 > 0), for plain and K-quant weights (whose
// decode path for one to three tokens differs from the batched one).
TEST(MatMul, ResultIndependentOfBatchAndRowRange) {
  const int64_t cols = 512, rows = 12;
  for (auto [file_type, type] : {std::pair{TensorType::kF32, WeightType::kF32},
                                 std::pair{TensorType::kQ4_K, WeightType::kQ4_K},
                                 std::pair{TensorType::kQ6_K, WeightType::kQ6_K}}) {
    const auto bytes = EncodeTensor(Values(size_t(rows * cols), 5), file_type);
    const WeightMatrix w{type, bytes.data(), rows, cols, bytes.size() / size_t(rows)};
    const auto x = Values(size_t(9 * cols), 6);
    std::vector<float> all(size_t(9 * rows));
    Active().matmul_rows(w, x.data(), cols, 9, all.data(), rows, 0, rows);
    for (int t = 0; t < 9; ++t) {
      std::vector<float> one(static_cast<size_t>(rows));
      Active().matmul_rows(w, x.data() + t * cols, cols, 1, one.data(), rows, 0, 5);
      Active().matmul_rows(w, x.data() + t * cols, cols, 1, one.data(), rows, 5, rows);
      ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * rows, size_t(rows) * 4)) << int(type) << " token " << t;
    }
    std::vector<float> three(size_t(3 * rows));  // the three-token decode path
    Active().matmul_rows(w, x.data() + 2 * cols, cols, 3, three.data(), rows, 0, rows);
    ASSERT_EQ(0, std::memcmp(three.data(), all.data() + 2 * rows, three.size() * 4)) << int(type);
  }
}

// The prefill kernels run their tiles in an order chosen for the caches:
// rows held in L2 in blocks while six-token groups pass (rows up to 1,024
// wide), or 12-token blocks streaming past 4-row blocks (longer rows). Every
// output is still one tile's: a batch of 71 tokens (a 64-token block and a
// tail of 6 + 1; 12-token blocks and a tail of 11 = 6 + 4 + 1) over 402 rows
// (several held blocks, rows left over), in one call and split at an odd row,
// gives each token the bits it gets alone, on every ISA; widths 1,000 and
// 1,090 have a column tail.
TEST(MatMul, PrefillTileOrderCoversEveryOutputWithTheDecodeBits) {
  IsaRestorer restore;
  constexpr int kTokens = 71;
  const int64_t rows = 402, split = 201;
  for (int64_t cols : {int64_t(768), int64_t(1000), int64_t(1040), int64_t(1090)}) {
    for (auto [file_type, type] : {std::pair{TensorType::kF32, WeightType::kF32},
                                   std::pair{TensorType::kF16, WeightType::kF16}}) {
      const auto bytes = EncodeTensor(Values(size_t(rows * cols), uint32_t(cols)), file_type);
      const WeightMatrix w{type, bytes.data(), rows, cols, bytes.size() / size_t(rows)};
      const auto x = Values(size_t(kTokens * cols), 11);
      for (Isa isa : SupportedIsas()) {
        SetIsa(isa);
        std::vector<float> all(size_t(kTokens * rows), -1.0f), halves(all.size(), -1.0f);
        Active().matmul_rows(w, x.data(), cols, kTokens, all.data(), rows, 0, rows);
        Active().matmul_rows(w, x.data(), cols, kTokens, halves.data(), rows, 0, split);
        Active().matmul_rows(w, x.data(), cols, kTokens, halves.data(), rows, split, rows);
        for (int t = 0; t < kTokens; ++t) {
          std::vector<float> one(static_cast<size_t>(rows));
          Active().matmul_rows(w, x.data() + t * cols, cols, 1, one.data(), rows, 0, rows);
          ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * rows, size_t(rows) * 4))
              << "type " << int(type) << " cols " << cols << " token " << t << " isa " << int(isa);
          ASSERT_EQ(0, std::memcmp(one.data(), halves.data() + t * rows, size_t(rows) * 4))
              << "rows split at " << split << ": type " << int(type) << " cols " << cols << " token " << t;
        }
      }
    }
  }
}

TEST(Ops, AxpyAndDotAgreeAcrossIsas) {
  IsaRestorer restore;
  const auto a = Values(203, 1), b = Values(203, 2);
  std::vector<float> dots, ys;
  for (Isa isa : SupportedIsas()) {
    SetIsa(isa);
    std::vector<float> y = b;
    Active().axpy(0.37f, a.data(), y.data(), 203);
    const float d = Active().dot(a.data(), b.data(), 203);
    if (dots.empty()) {
      dots.push_back(d);
      ys = y;
    } else {
      EXPECT_EQ(0, std::memcmp(&d, &dots[0], 4)) << IsaName(isa);
      EXPECT_EQ(0, std::memcmp(ys.data(), y.data(), ys.size() * 4)) << IsaName(isa);
    }
  }
}

TEST(Ops, ExpDeterministicIsAccurate) {
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double want = std::exp(double(x));
    EXPECT_NEAR(ExpDeterministic(x) / want, 1.0, 3e-7) << x;
  }
  EXPECT_EQ(ExpDeterministic(-100.0f), 0.0f);
  EXPECT_TRUE(std::isinf(ExpDeterministic(100.0f)));
}

}  // namespace
}  // namespace tandem::kernels

namespace tandem::kernels {
namespace {

TEST(Ops, SiluMulAllIsasBitwiseEqual) {
  IsaRestorer restore;
  std::vector<float> gate = Values(1003, 3), up = Values(1003, 4);
  for (size_t i = 0; i < gate.size(); i += 7) gate[i] *= 60.0f;  // reach exp's clamps
  gate[5] = 0.0f;
  gate[6] = -0.0f;
  std::vector<float> ref;
  for (Isa isa : SupportedIsas()) {
    SetIsa(isa);
    std::vector<float> g = gate;
    SiluMul(g.data(), up.data(), int64_t(g.size()));
    if (ref.empty()) {
      ref = g;
      for (size_t i = 0; i < g.size(); ++i) {
        const double want = double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * up[i];
        EXPECT_NEAR(g[i], want, 1e-5 * (1.0 + std::fabs(want))) << i;
      }
    } else {
      EXPECT_EQ(0, std::memcmp(ref.data(), g.data(), g.size() * 4)) << IsaName(isa);
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
