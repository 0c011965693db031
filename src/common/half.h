// Exact conversions between fp32 and the 16-bit float formats stored in model
// files and caches. Conversions to fp32 are exact; conversions from fp32 round
// to nearest even. Pure bit manipulation: the same bits on every machine.
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem {

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float Bf16ToFloat(uint16_t h) { return BitsToFloat(uint32_t(h) << 16); }

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return BitsToFloat(sign);
    // Subnormal: value = man * 2^-24, exact in fp32.
    float v = float(man) * BitsToFloat(0x33800000u);  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (man << 13));
  return BitsToFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t FloatToF16(float f) {
  const uint32_t u = FloatToBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // below fp16 normal range: subnormal or zero
    // Round abs * 2^24 to nearest even integer using an fp32 add trick.
    float v = BitsToFloat(abs) * BitsToFloat(0x4b800000u);  // * 2^24, exact
    uint32_t m = uint32_t(v);
    float frac = v - float(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return uint16_t(sign | m);
  }
  uint32_t r = abs + 0x0fffu + ((abs >> 13) & 1u) - (112u << 23);
  return uint16_t(sign | (r >> 13));
}

}  // namespace tandem
