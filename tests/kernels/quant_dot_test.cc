// The integer dot products of block-quantized weights (kernels/quant_dot.h):
// activations quantize to the same bytes on every ISA, edge values included;
// the prequantized path is the matmul path; results do not depend on how
// rows and tokens are split.
#include "kernels/quant_dot.h"
#include "kernels/quant_pack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/half.h"
#include "kernels/cpu.h"
#include "model/presets.h"
#include "support/isas.h"

namespace tandem::kernels {
namespace {

uint32_t Next(uint32_t& s) { return s = s * 1664525u + 1013904223u; }

std::vector<float> Activations(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(int32_t(Next(seed) >> 8) % 20001 - 10000) / 3000.0f;
  return v;
}

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> sums;
};

Quantized QuantizeWith(const KernelTable& kt, const std::vector<float>& x, int n, int64_t cols, int block) {
  Quantized out{std::vector<int8_t>(size_t(n * cols)), std::vector<float>(size_t(n * cols / block)),
                std::vector<int16_t>(size_t(n * cols / 16))};
  kt.quantize_acts(x.data(), cols, n, cols, block, out.q.data(), out.d.data(), out.sums.data());
  return out;
}

// Edge values in their own blocks: zeros, NaN, infinities, subnormals, a
// value that lands exactly halfway between two steps, the largest floats.
TEST(QuantDot, ActivationsQuantizeToTheSameBytesOnEveryIsa) {
  testing::IsaRestorer restore;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int block : {32, 256}) {
    const int n = 3;
    const int64_t cols = 8 * 256;
    std::vector<float> x = Activations(size_t(n * cols), uint32_t(block));
    auto fill = [&](int64_t b, auto value) {
      for (int k = 0; k < block; ++k) x[size_t(b * block + k)] = value(k);
    };
    fill(0, [](int) { return 0.0f; });
    fill(1, [&](int k) { return k == 3 ? nan : float(k) - 7.5f; });
    fill(2, [&](int k) { return k == 5 ? inf : k == 6 ? -inf : float(k); });
    fill(3, [](int k) { return std::ldexp(float(k % 9) - 4.0f, -140); });  // subnormal: so is the step
    fill(4, [](int k) { return k == 0 ? 127.0f : float(k % 5) - 2.5f; });  // step 1: exact ties round to even
    fill(5, [](int k) { return (k % 2 ? -1.0f : 1.0f) * std::numeric_limits<float>::max(); });
    fill(6, [](int k) { return -float(k) * 1e-3f; });
    const Quantized ref = QuantizeWith(ScalarTable(), x, n, cols, block);
    // The reference's rules, spelled out for the blocks that test them.
    for (int k = 0; k < block; ++k) EXPECT_EQ(ref.q[size_t(k)], 0);
    EXPECT_EQ(ref.d[0], 0.0f);
    EXPECT_EQ(ref.q[size_t(block + 3)], 0) << "NaN quantizes to 0";
    for (int k = 0; k < block; ++k) EXPECT_EQ(ref.q[size_t(3 * block + k)], 0) << "a subnormal step quantizes to 0";
    EXPECT_EQ(ref.q[size_t(4 * block)], 127);
    EXPECT_EQ(ref.q[size_t(4 * block + 1)], -2) << "-1.5 rounds to even";
    EXPECT_EQ(ref.q[size_t(4 * block + 3)], 0) << "0.5 rounds to even";
    EXPECT_EQ(ref.q[size_t(4 * block + 4)], 2) << "1.5 rounds to even";
    for (size_t g = 0; g < ref.sums.size(); ++g) {
      int s = 0;
      for (int k = 0; k < 16; ++k) s += ref.q[16 * g + size_t(k)];
      ASSERT_EQ(ref.sums[g], s) << g;
    }
    for (Isa isa : testing::SupportedIsas()) {
      SetIsa(isa);
      const Quantized got = QuantizeWith(Active(), x, n, cols, block);
      EXPECT_EQ(got.q, ref.q) << IsaName(isa) << " block " << block;
      EXPECT_EQ(0, std::memcmp(got.d.data(), ref.d.data(), got.d.size() * 4)) << IsaName(isa) << " block " << block;
      EXPECT_EQ(got.sums, ref.sums) << IsaName(isa) << " block " << block;
    }
  }
}

struct Case {
  TensorType file;
  WeightType kernel;
};
constexpr Case kQuantCases[] = {{TensorType::kQ8_0, WeightType::kQ8_0}, {TensorType::kQ4_0, WeightType::kQ4_0},
                                {TensorType::kQ5_0, WeightType::kQ5_0}, {TensorType::kQ4_K, WeightType::kQ4_K},
                                {TensorType::kQ5_K, WeightType::kQ5_K}, {TensorType::kQ6_K, WeightType::kQ6_K}};

// For the types the forward pass multiplies in integers, matmul_rows over
// float activations is matmul_rows_q over their quantization; matmul_rows_q
// gives the same bits on every ISA for every type it has, from weights packed
// once (quant_pack.h, as a model loads them) or packed per call; and an
// output is the same bits whatever rows and tokens share its call (rows: three
// groups of 16, split inside groups and across them).
TEST(QuantDot, PrequantizedPathAndEverySplitGiveTheSameBits) {
  testing::IsaRestorer restore;
  const int64_t cols = 768, rows = 37;
  const int n = 70;  // past the kernels' 64-token blocks
  for (const Case& c : kQuantCases) {
    const auto bytes = EncodeTensor(Activations(size_t(rows * cols), 9), c.file);
    const WeightMatrix w{c.kernel, bytes.data(), rows, cols, bytes.size() / size_t(rows)};
    const auto x = Activations(size_t(n * cols), 10);
    std::vector<float> ref;
    for (Isa isa : testing::SupportedIsas()) {
      SetIsa(isa);
      const KernelTable& kt = Active();
      std::vector<float> all(size_t(n * rows), -1.0f);
      kt.matmul_rows(w, x.data(), cols, n, all.data(), rows, 0, rows);
      const int block = ActBlockFor(c.kernel);
      const Quantized q = QuantizeWith(kt, x, n, cols, block);
      const QuantizedActs acts{q.q.data(), q.d.data(), q.sums.data(), cols, block};
      std::vector<float> pre(all.size(), -1.0f);
      kt.matmul_rows_q(w, acts, n, pre.data(), rows, 0, 4);
      kt.matmul_rows_q(w, acts, n, pre.data(), rows, 4, 21);
      kt.matmul_rows_q(w, acts, n, pre.data(), rows, 21, rows);
      if (ref.empty()) ref = pre;
      ASSERT_EQ(0, std::memcmp(ref.data(), pre.data(), pre.size() * 4)) << IsaName(isa) << " " << int(c.kernel);
      const PackedWeights packing(w);
      WeightMatrix wp = w;
      wp.packed = packing.data();
      ASSERT_NE(nullptr, wp.packed);
      std::vector<float> packed(all.size(), -1.0f);
      kt.matmul_rows_q(wp, acts, n, packed.data(), rows, 0, 16);
      kt.matmul_rows_q(wp, acts, n, packed.data(), rows, 16, 19);
      kt.matmul_rows_q(wp, acts, n, packed.data(), rows, 19, rows);
      ASSERT_EQ(0, std::memcmp(ref.data(), packed.data(), pre.size() * 4)) << IsaName(isa) << " " << int(c.kernel);
      ASSERT_TRUE(UsesIntegerDot(c.kernel));  // every block-quantized type (numerics 3)
      ASSERT_EQ(0, std::memcmp(ref.data(), all.data(), all.size() * 4)) << IsaName(isa) << " " << int(c.kernel);
      for (int t : {0, 5, 63, 64, 69}) {  // one token alone, and three from t
        std::vector<float> one(size_t(rows), -1.0f);
        kt.matmul_rows(w, x.data() + t * cols, cols, 1, one.data(), rows, 0, rows);
        ASSERT_EQ(0, std::memcmp(one.data(), ref.data() + t * rows, size_t(rows) * 4)) << IsaName(isa) << " " << t;
        if (t + 3 <= n) {
          std::vector<float> three(size_t(3 * rows), -1.0f);
          kt.matmul_rows(w, x.data() + t * cols, cols, 3, three.data(), rows, 3, rows);
          kt.matmul_rows(w, x.data() + t * cols, cols, 3, three.data(), rows, 0, 3);
          ASSERT_EQ(0, std::memcmp(three.data(), ref.data() + t * rows, three.size() * 4)) << IsaName(isa) << " " << t;
        }
      }
    }
  }
}

// The integers at their extremes do not overflow: every weight at its
// largest magnitude against activations at +-127 gives the exact sum.
TEST(QuantDot, ExtremeBlocksGiveExactIntegers) {
  testing::IsaRestorer restore;
  const int64_t cols = 256;
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t k = 0; k < cols; ++k) x[size_t(k)] = k % 3 == 0 ? -1.0f : 1.0f;  // quantizes to +-127
  for (const Case& c : kQuantCases) {
    const int bytes_per = WeightBlockBytes(c.kernel), block = ActBlockFor(c.kernel);
    std::vector<uint8_t> row(size_t(cols / block * bytes_per), 0xff);  // every quant, scale and min at its top
    for (int64_t b = 0; b < cols / block; ++b) {
      uint8_t* blk = row.data() + b * bytes_per;
      const int at = c.kernel == WeightType::kQ6_K ? 208 : 0;
      const uint16_t one = FloatToF16(1.0f);
      for (int h = 0; h < (HasMins(c.kernel) ? 2 : 1); ++h) std::memcpy(blk + at + 2 * h, &one, 2);
      if (c.kernel == WeightType::kQ6_K) std::memset(blk + 192, 0x80, 16);  // scales -128
      if (c.kernel == WeightType::kQ8_0) std::memset(blk + 2, 0x80, 32);    // quants -128
    }
    const WeightMatrix w{c.kernel, row.data(), 1, cols, row.size()};
    // The exact value in float64 from the decoded weights and quantized activations.
    double want = 0;
    for (int64_t k = 0; k < cols; ++k) want += double(WeightAt(c.kernel, row.data(), k)) * double(x[size_t(k)]);
    for (Isa isa : testing::SupportedIsas()) {
      SetIsa(isa);
      float y = 0;
      Active().matmul_rows(w, x.data(), cols, 1, &y, 1, 0, 1);
      EXPECT_NEAR(y, want, 1e-6 * std::fabs(want) + 1e-3) << IsaName(isa) << " " << int(c.kernel);
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
