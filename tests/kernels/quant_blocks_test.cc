// The block-quantized weight types: the kernels' decode against an
// independent decoder written here from ggml's block definitions (whole
// blocks at a time, in ggml's loop order), on random blocks including extreme
// scales; tandem's quantizers round-trip within each type's step; and, when
// llama-quantize output is at hand, llama.cpp's files decode close to their source.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/half.h"
#include "kernels/cpu.h"
#include "kernels/quant_dot.h"
#include "kernels/weight_row.h"
#include "model/gguf.h"
#include "model/quantize.h"
#include "support/isas.h"

namespace tandem::kernels {
namespace {

float Half(const uint8_t* p) { return F16ToFloat(uint16_t(p[0] | p[1] << 8)); }

// ggml's dequantize_row_* loops, one block into out[0, block).
void ReferenceDecode(WeightType t, const uint8_t* b, float* out) {
  switch (t) {
    case WeightType::kQ4_0: {
      const float d = Half(b);
      for (int j = 0; j < 16; ++j) {
        out[j] = d * float((b[2 + j] & 0xf) - 8);
        out[j + 16] = d * float((b[2 + j] >> 4) - 8);
      }
      return;
    }
    case WeightType::kQ5_0: {
      const float d = Half(b);
      uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        out[j] = d * float(((b[6 + j] & 0xf) | h0) - 16);
        out[j + 16] = d * float(((b[6 + j] >> 4) | h1) - 16);
      }
      return;
    }
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const bool five = t == WeightType::kQ5_K;
      const float d = Half(b), dmin = Half(b + 2);
      const uint8_t* sc = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* q = b + 16 + (five ? 32 : 0);
      auto scale_min = [&](int j, int* s, int* m) {
        if (j < 4) {
          *s = sc[j] & 63;
          *m = sc[j + 4] & 63;
        } else {
          *s = (sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4);
          *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        }
      };
      int is = 0;
      uint8_t u1 = 1, u2 = 2;
      for (int j = 0; j < 256; j += 64) {
        int s, m;
        scale_min(is, &s, &m);
        const float d1 = d * float(s), m1 = dmin * float(m);
        scale_min(is + 1, &s, &m);
        const float d2 = d * float(s), m2 = dmin * float(m);
        for (int l = 0; l < 32; ++l) *out++ = d1 * float((q[l] & 0xf) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) *out++ = d2 * float((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        q += 32;
        is += 2;
        u1 = uint8_t(u1 << 2);
        u2 = uint8_t(u2 << 2);
      }
      return;
    }
    case WeightType::kQ6_K: {
      const float d = Half(b + 208);
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = int((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
          const int q2 = int((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
          const int q3 = int((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
          const int q4 = int((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
          out[n + l] = d * float(sc[is]) * float(q1);
          out[n + l + 32] = d * float(sc[is + 2]) * float(q2);
          out[n + l + 64] = d * float(sc[is + 4]) * float(q3);
          out[n + l + 96] = d * float(sc[is + 6]) * float(q4);
        }
        ql += 64;
        qh += 32;
        sc += 8;
      }
      return;
    }
    default: return;
  }
}

struct TypeInfo {
  WeightType kernel;
  TensorType file;
  int block, bytes;
  double step;  // round-trip error bound, relative to the block's largest magnitude
};

const TypeInfo kTypes[] = {
    {WeightType::kQ4_0, TensorType::kQ4_0, 32, kQ4_0BlockBytes, 0.13},
    {WeightType::kQ5_0, TensorType::kQ5_0, 32, kQ5_0BlockBytes, 0.065},
    {WeightType::kQ4_K, TensorType::kQ4_K, 256, kQ4KBlockBytes, 0.12},
    {WeightType::kQ5_K, TensorType::kQ5_K, 256, kQ5KBlockBytes, 0.06},
    {WeightType::kQ6_K, TensorType::kQ6_K, 256, kQ6KBlockBytes, 0.03},
};

uint32_t Next(uint32_t& s) { return s = s * 1664525u + 1013904223u; }

TEST(QuantBlocks, DecodeMatchesAnIndependentDecoderOnRandomBlocks) {
  uint32_t seed = 7;
  // Scales: random bits, the largest finite f16, its smallest subnormal, zero.
  const uint16_t extremes[] = {0x7bff, 0xfbff, 0x0001, 0x8001, 0x0000, 0x3c00};
  for (const TypeInfo& t : kTypes) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<uint8_t> block(size_t(t.bytes));
      for (auto& b : block) b = uint8_t(Next(seed) >> 24);
      const uint16_t scale = trial < 6 ? extremes[trial] : uint16_t(Next(seed) >> 16) & 0x7bff;  // finite
      const size_t at = t.kernel == WeightType::kQ6_K ? 208 : 0;
      block[at] = uint8_t(scale & 0xff);
      block[at + 1] = uint8_t(scale >> 8);
      std::vector<float> want(size_t(t.block)), got(size_t(t.block));
      ReferenceDecode(t.kernel, block.data(), want.data());
      for (int k = 0; k < t.block; ++k) got[size_t(k)] = WeightAt(t.kernel, block.data(), k);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
          << TensorTypeName(t.file) << " trial " << trial;
    }
  }
}

// Random block bytes (any scale bits but NaN/inf, quants anywhere) through
// every ISA's matmul, and every ISA gives the same bits: each output is the
// reference integer dot product of quant_dot.h (every block-quantized type;
// one-hot: the decoded weight times the activation's step, within float
// rounding of WeightAt's value).
TEST(QuantBlocks, EveryIsaDecodesRandomBlocksLikeTheScalarPath) {
  testing::IsaRestorer restore;
  uint32_t seed = 5;
  for (const TypeInfo& t : kTypes) {
    const int rows = 7, blocks = 512 / t.block, cols = 512;
    const size_t row_bytes = size_t(blocks * t.bytes);
    std::vector<uint8_t> w(rows * row_bytes);
    for (auto& b : w) b = uint8_t(Next(seed) >> 24);
    for (int r = 0; r < rows; ++r) {
      for (int bl = 0; bl < blocks; ++bl) {
        uint8_t* block = w.data() + r * row_bytes + size_t(bl * t.bytes);
        const size_t at = t.kernel == WeightType::kQ6_K ? 208 : 0;
        const int halves = t.kernel == WeightType::kQ4_K || t.kernel == WeightType::kQ5_K ? 2 : 1;
        for (int h = 0; h < halves; ++h) {
          const uint16_t s = uint16_t(Next(seed) >> 16) & 0x3fff;  // finite, up to 2: no overflow in dots
          block[at + 2 * h] = uint8_t(s & 0xff);
          block[at + 2 * h + 1] = uint8_t(s >> 8);
        }
      }
    }
    const WeightMatrix m{t.kernel, w.data(), rows, cols, row_bytes};
    for (int n_tok : {1, 6, 13}) {
      std::vector<float> x(size_t(n_tok * cols), 0.0f);
      for (int j = 0; j < n_tok; ++j) x[size_t(j * cols + (j * 37) % cols)] = 1.0f;  // one-hot
      std::vector<float> dense(x.size());
      for (auto& v : dense) v = float(int32_t(Next(seed) >> 8) % 2001 - 1000) / 1000.0f;
      std::vector<float> ref;
      for (Isa isa : testing::SupportedIsas()) {
        SetIsa(isa);
        std::vector<float> y(size_t(n_tok * rows)), yd(y.size());
        Active().matmul_rows(m, x.data(), cols, n_tok, y.data(), rows, 0, rows);
        Active().matmul_rows(m, dense.data(), cols, n_tok, yd.data(), rows, 0, rows);
        if (!UsesIntegerDot(t.kernel)) {  // fp32 products: one-hot outputs are the decoded weights
          for (int j = 0; j < n_tok; ++j) {
            for (int r = 0; r < rows; ++r) {
              const float want = WeightAt(t.kernel, w.data() + r * row_bytes, (j * 37) % cols);
              ASSERT_EQ(y[size_t(j * rows + r)], want) << TensorTypeName(t.file) << " " << IsaName(isa);
            }
          }
        }
        for (const auto* in : {&x, &dense}) {
          if (!UsesIntegerDot(t.kernel)) break;
          const std::vector<float>& got = in == &x ? y : yd;
          for (int j = 0; j < n_tok; ++j) {
            const int block = ActBlockFor(t.kernel);
            std::vector<int8_t> q(static_cast<size_t>(cols));
            std::vector<float> da(size_t(cols / block));
            std::vector<int16_t> sums(static_cast<size_t>(cols / 16));
            for (int b0 = 0; b0 < cols; b0 += block) {
              QuantizeActBlock(in->data() + j * cols + b0, block, q.data() + b0, &da[size_t(b0 / block)],
                               sums.data() + b0 / 16);
            }
            for (int r = 0; r < rows; ++r) {
              const float want = QuantRowDot(t.kernel, w.data() + r * row_bytes, cols, q.data(), da.data(), sums.data());
              ASSERT_EQ(FloatToBits(got[size_t(j * rows + r)]), FloatToBits(want))
                  << TensorTypeName(t.file) << " " << IsaName(isa);
              if (in == &x) {
                const float weight = WeightAt(t.kernel, w.data() + r * row_bytes, (j * 37) % cols);
                // Scales up to 2 times six-bit scales and quants: terms up to 8192.
                EXPECT_NEAR(want, weight, 1e-6 * (std::fabs(weight) + 8192.0)) << TensorTypeName(t.file);
              }
            }
          }
        }
        if (ref.empty()) {
          ref = yd;
        } else {
          ASSERT_EQ(0, std::memcmp(ref.data(), yd.data(), yd.size() * 4)) << TensorTypeName(t.file) << " " << IsaName(isa);
        }
      }
    }
  }
}

TEST(QuantBlocks, QuantizersRoundTripWithinOneStep) {
  uint32_t seed = 11;
  for (const TypeInfo& t : kTypes) {
    const int n = 4 * 256;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = float(int32_t(Next(seed) >> 8) % 20001 - 10000) / 10000.0f;
    for (int i = 0; i < 32; ++i) x[size_t(i)] = 0;  // an all-zero block decodes to zeros
    std::vector<uint8_t> bytes;
    QuantizeBlocks(t.file, x.data(), n, bytes);
    ASSERT_EQ(bytes.size(), size_t(n / t.block * t.bytes)) << TensorTypeName(t.file);
    for (int k = 0; k < n; ++k) {
      const float w = WeightAt(t.kernel, bytes.data(), k);
      if (k < 32) {
        EXPECT_EQ(w, 0.0f) << TensorTypeName(t.file);
      } else {
        EXPECT_NEAR(w, x[size_t(k)], t.step) << TensorTypeName(t.file) << " element " << k;
      }
    }
  }
}

// Set TANDEM_LLAMA_QUANTIZED to a llama-quantize output of the F32 GGUF named
// by TANDEM_LLAMA_SOURCE (e.g. mkmodel --preset 100m --type f32, then
// llama-quantize ... Q4_K_M) to check tandem reads ggml's layouts as ggml
// writes them: every matrix decodes within its type's error of the source.
TEST(QuantBlocks, LlamaQuantizedFileDecodesCloseToItsSource) {
  const char* quantized = std::getenv("TANDEM_LLAMA_QUANTIZED");
  const char* source = std::getenv("TANDEM_LLAMA_SOURCE");
  if (quantized == nullptr || source == nullptr) {
    GTEST_SKIP() << "SKIPPED LOUDLY: set TANDEM_LLAMA_QUANTIZED and TANDEM_LLAMA_SOURCE to check llama.cpp's files";
  }
  auto q = GgufFile::Open(quantized);
  auto f = GgufFile::Open(source);
  ASSERT_TRUE(q.ok() && f.ok());
  int checked = 0;
  std::map<std::string, double> worst;
  for (const TensorInfo& t : (*q)->tensors()) {
    if (t.type == TensorType::kF32 || t.dims.size() != 2) continue;
    const TensorInfo* src = (*f)->FindTensor(t.name);
    ASSERT_NE(src, nullptr) << t.name;
    uint64_t block = 1, block_bytes = 1;
    ASSERT_TRUE(TensorTypeBlock(uint32_t(t.type), &block, &block_bytes));
    const size_t row_bytes = size_t(t.dims[0] / block * block_bytes);
    const uint8_t* qd = t.data;
    const auto* fd = reinterpret_cast<const float*>(src->data);
    WeightType wt = WeightType::kF32;
    for (const TypeInfo& i : kTypes) {
      if (i.file == t.type) wt = i.kernel;
    }
    if (t.type == TensorType::kQ8_0) wt = WeightType::kQ8_0;
    if (t.type == TensorType::kF16) wt = WeightType::kF16;
    double err = 0, mag = 0;
    for (uint64_t r = 0; r < std::min<uint64_t>(t.dims[1], 64); ++r) {
      for (uint64_t k = 0; k < t.dims[0]; ++k) {
        const double want = fd[r * t.dims[0] + k];
        const double got = WeightAt(wt, qd + r * row_bytes, int64_t(k));
        err += (got - want) * (got - want);
        mag += want * want;
      }
    }
    const double rel = std::sqrt(err / mag);
    EXPECT_LT(rel, 0.15) << t.name << " " << TensorTypeName(t.type);
    double& w = worst[TensorTypeName(t.type)];
    w = std::max(w, rel);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  std::cout << "[ llama.cpp file ] " << checked << " matrices decode close to their source; worst relative RMS error:";
  for (const auto& [type, rel] : worst) std::cout << " " << type << " " << rel;
  std::cout << "\n";
}

}  // namespace
}  // namespace tandem::kernels
