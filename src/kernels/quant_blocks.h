// The GGUF block-quantized weight types beyond Q8_0, as ggml defines them,
// and the one scalar decode of each element to fp32 (WeightAt: embedding
// lookups, tests, the float64 references; the matmuls take these types'
// integer codes instead, quant_dot.h). Each decode is a fixed short sequence
// of fp32 operations:
//   Q4_0  32 per 18-byte block: f16 d, 16 bytes of nibbles;      w = d * (q - 8)
//   Q5_0  32 per 22-byte block: f16 d, 32 high bits, 16 bytes;   w = d * (q - 16)
//   Q4_K  256 per 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) for
//         8 sub-blocks of 32, 128 bytes of nibbles;              w = (d * sc) * q - dmin * m
//   Q5_K  256 per 176 bytes: as Q4_K plus 32 bytes of high bits
//   Q6_K  256 per 210 bytes: 128 bytes low nibbles, 64 bytes of 2-bit highs,
//         16 int8 scales (one per 16), f16 d at the end;        w = (d * sc) * (q - 32)
#pragma once

#include <cstdint>

#include "common/half.h"

namespace tandem::kernels {

constexpr int kQ4_0BlockBytes = 18, kQ5_0BlockBytes = 22;
constexpr int kSuperBlock = 256;
constexpr int kQ4KBlockBytes = 144, kQ5KBlockBytes = 176, kQ6KBlockBytes = 210;

inline float HalfAt(const uint8_t* p) { return F16ToFloat(uint16_t(p[0] | (p[1] << 8))); }

// Element k (< 32) of a Q4_0 block.
inline float DecodeQ4_0(const uint8_t* b, int k) {
  const uint8_t byte = b[2 + (k & 15)];
  const int q = k < 16 ? byte & 0xf : byte >> 4;
  return HalfAt(b) * float(q - 8);
}

inline float DecodeQ5_0(const uint8_t* b, int k) {
  const uint32_t qh = uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24;
  const uint8_t byte = b[6 + (k & 15)];
  const int q = (k < 16 ? byte & 0xf : byte >> 4) | int((qh >> k) & 1) << 4;
  return HalfAt(b) * float(q - 16);
}

// The 6-bit scale and min of sub-block j (< 8) from Q4_K/Q5_K's 12 bytes.
inline void ScaleMinK4(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Element k (< 256) of a Q4_K (five = false) or Q5_K (five = true) super-block.
inline float DecodeQ45K(const uint8_t* b, int k, bool five) {
  const int chunk = k / 64, i = k % 64, l = i % 32, sub = 2 * chunk + i / 32;
  int sc, m;
  ScaleMinK4(b + 4, sub, &sc, &m);
  const uint8_t* qs = b + 16 + (five ? 32 : 0);
  const uint8_t byte = qs[32 * chunk + l];
  int q = i < 32 ? byte & 0xf : byte >> 4;
  if (five) q += ((b[16 + l] >> sub) & 1) * 16;
  const float d1 = HalfAt(b) * float(sc);
  const float m1 = HalfAt(b + 2) * float(m);
  return d1 * float(q) - m1;
}

inline float DecodeQ6K(const uint8_t* b, int k) {
  const int half = k / 128, j = k % 128, quarter = j / 32, l = j % 32;
  const uint8_t ql = b[half * 64 + l + (quarter & 1) * 32];
  const uint8_t qh = b[128 + half * 32 + l];
  const int q = ((quarter < 2 ? ql & 0xf : ql >> 4) | ((qh >> (2 * quarter)) & 3) << 4) - 32;
  const int8_t sc = int8_t(b[192 + half * 8 + l / 16 + 2 * quarter]);
  return HalfAt(b + 208) * float(sc) * float(q);
}

// Elements [k, k + 16) of a row (k % 16 == 0): the same formulas as above with
// each block's scales computed once, for the SIMD paths (the elementwise fp32
// operations are those of the scalar decode, so the values are identical).
inline void Decode16Q4_0Q5_0(const uint8_t* row, int64_t k, bool five, float* out) {
  const uint8_t* b = row + (k / 32) * (five ? kQ5_0BlockBytes : kQ4_0BlockBytes);
  const int e0 = int(k % 32);
  const float d = HalfAt(b);
  const uint32_t qh = five ? uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24 : 0;
  const uint8_t* qs = b + (five ? 6 : 2);
  for (int j = 0; j < 16; ++j) {
    int q = e0 == 0 ? qs[j] & 0xf : qs[j] >> 4;
    if (five) q |= int((qh >> (e0 + j)) & 1) << 4;
    out[j] = d * float(q - (five ? 16 : 8));
  }
}

}  // namespace tandem::kernels
