// The deterministic exp shared by every ISA path. The scalar form below is the
// definition; SIMD forms (in the per-ISA files) perform the identical sequence
// of IEEE operations lane by lane, so they give the same bits.
//
// x = n ln2 + r with n = nearbyint(x log2 e) and ln2 split in two parts, then
// a degree-7 Taylor polynomial of e^r in Horner form with FMAs, scaled by 2^n.
// exp(x) = 0 for x < -87.3 (so n >= -126 and 2^n is a normal float).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tandem::kernels {

constexpr float kExpLog2e = 1.44269504f;
constexpr float kExpLn2Hi = 0.693145752f;
constexpr float kExpLn2Lo = 1.42860677e-06f;
constexpr float kExpUnderflow = -87.3f;
constexpr float kExpOverflow = 88.3f;
constexpr float kExpPoly[8] = {1.98412698e-04f, 1.38888889e-03f, 8.33333333e-03f,
                               4.16666667e-02f, 1.66666667e-01f, 0.5f, 1.0f, 1.0f};

inline float ExpInline(float x) {
  if (x != x) return x;
  if (x < kExpUnderflow) return 0.0f;
  if (x > kExpOverflow) return HUGE_VALF;
  const float n = std::nearbyint(x * kExpLog2e);
  float r = __builtin_fmaf(-n, kExpLn2Hi, x);
  r = __builtin_fmaf(-n, kExpLn2Lo, r);
  float p = kExpPoly[0];
  for (int i = 1; i < 8; ++i) p = __builtin_fmaf(p, r, kExpPoly[i]);
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

inline float SiluMulInline(float g, float up) { return g / (1.0f + ExpInline(-g)) * up; }

}  // namespace tandem::kernels
