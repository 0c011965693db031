// fp8 E4M3 as OCP "e4m3fn": 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities; S.1111.111 (0x7F / 0xFF) is NaN; largest finite 448 (0x7E);
// subnormals m * 2^-9 for m in 1..7. Used for the index-K cache (DSA).
//
// Pure bit manipulation and exact fp32 arithmetic: the same bits on every
// machine and every ISA path (invariant 5). Conversions to fp32 are exact.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace tandem {

// Exact value of an e4m3 code; NaN codes give a quiet fp32 NaN of that sign.
constexpr float Fp8E4M3ToFloat(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t man = v & 0x7u;
  if (exp == 0xFu && man == 0x7u) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exp == 0) {
    // Subnormal: man * 2^-9, exact (man < 8). Zero keeps its sign.
    const float magnitude = float(man) * std::bit_cast<float>(0x3B000000u);  // 2^-9
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  // Normal: rebias the exponent (127 - 7 = 120) and widen the mantissa.
  return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (man << 20));
}

// Rounds to nearest, ties to even. |f| > 448 (and ±inf) saturate to ±448;
// NaN gives 0x7F. Values that round to zero keep their sign (-0 is 0x80).
constexpr uint8_t FloatToFp8E4M3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7F;                  // NaN
  if (abs > 0x43E00000u) return uint8_t(sign | 0x7E);  // beyond 448: saturate
  if (abs >= 0x3C800000u) {
    // Normal range [2^-6, 448]: drop 20 mantissa bits with round-half-even.
    // A carry out of the mantissa bumps the exponent, which is exactly right;
    // it cannot pass 448 because 448 has the largest exponent and mantissa.
    const uint32_t rounded = abs + 0x7FFFFu + ((abs >> 20) & 1u);
    return uint8_t(sign | ((rounded >> 20) - (120u << 3)));
  }
  // Below 2^-6: the result is m * 2^-9 with m = round_half_even(|f| * 2^9),
  // 0 <= m <= 8 (m == 8 is 0x08, the smallest normal: the codes are
  // contiguous). |f| = full * 2^(e - 150) with full the 24-bit significand,
  // so m = round(full >> (141 - e)).
  const uint32_t e = abs >> 23;
  if (e < 110) return sign;         // |f| < 2^-17: far below half of 2^-9
  const uint32_t shift = 141u - e;  // 21..31
  const uint32_t full = 0x800000u | (abs & 0x7FFFFFu);
  uint32_t m = full >> shift;
  const uint32_t rest = full & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (m & 1u))) ++m;
  return uint8_t(sign | m);
}

// All 256 decoded values, indexed by code (for table lookups and gathers).
const float* Fp8E4M3Table();

// Per-token (row) quantization: scale = max|x| / 448 (1 when the row is all
// zero), q[i] = e4m3(x[i] / scale). REQUIRES: x finite.
void QuantizeFp8Row(const float* x, int64_t n, uint8_t* q, float* scale);
// x[i] = e4m3(q[i]) * scale.
void DequantizeFp8Row(const uint8_t* q, float scale, int64_t n, float* x);

}  // namespace tandem
