#include "common/fp8.h"

namespace tandem {
namespace {

constexpr std::array<float, 256> MakeFp8E4M3Table() {
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) table[size_t(v)] = Fp8E4M3ToFloat(uint8_t(v));
  return table;
}

constexpr std::array<float, 256> kFp8E4M3Table = MakeFp8E4M3Table();
constexpr float kFp8E4M3Max = 448.0f;

}  // namespace

const float* Fp8E4M3Table() { return kFp8E4M3Table.data(); }

void QuantizeFp8Row(const float* x, int64_t n, uint8_t* q, float* scale) {
  float max_abs = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    if (a > max_abs) max_abs = a;
  }
  // Dividing by the stored scale (not multiplying by a precomputed inverse)
  // keeps the one rounding that the error bound in fp8_test.cc accounts for.
  const float s = max_abs > 0.0f ? max_abs / kFp8E4M3Max : 1.0f;
  for (int64_t i = 0; i < n; ++i) q[i] = FloatToFp8E4M3(x[i] / s);
  *scale = s;
}

void DequantizeFp8Row(const uint8_t* q, float scale, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = kFp8E4M3Table[q[i]] * scale;
}

}  // namespace tandem
