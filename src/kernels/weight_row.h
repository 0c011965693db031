// Scalar access to one weight of a row, as its exact fp32 value. Shared by the
// scalar kernels and by the SIMD kernels' tails, so every path converts alike.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/half.h"
#include "kernels/kernel_table.h"
#include "kernels/quant_blocks.h"

namespace tandem::kernels {

constexpr int kQ8Block = 32;
constexpr int kQ8BlockBytes = 34;  // fp16 scale + 32 int8

inline float WeightAt(WeightType type, const uint8_t* row, int64_t k) {
  switch (type) {
    case WeightType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * k, 4);
      return f;
    }
    case WeightType::kF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return F16ToFloat(h);
    }
    case WeightType::kBF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return Bf16ToFloat(h);
    }
    case WeightType::kQ8_0: {
      const uint8_t* block = row + (k / kQ8Block) * kQ8BlockBytes;
      uint16_t d;
      std::memcpy(&d, block, 2);
      const int8_t q = int8_t(block[2 + k % kQ8Block]);
      return F16ToFloat(d) * float(q);  // exact: 11-bit scale times 8-bit int
    }
    case WeightType::kQ4_0: return DecodeQ4_0(row + (k / 32) * kQ4_0BlockBytes, int(k % 32));
    case WeightType::kQ5_0: return DecodeQ5_0(row + (k / 32) * kQ5_0BlockBytes, int(k % 32));
    case WeightType::kQ4_K: return DecodeQ45K(row + (k / kSuperBlock) * kQ4KBlockBytes, int(k % kSuperBlock), false);
    case WeightType::kQ5_K: return DecodeQ45K(row + (k / kSuperBlock) * kQ5KBlockBytes, int(k % kSuperBlock), true);
    case WeightType::kQ6_K: return DecodeQ6K(row + (k / kSuperBlock) * kQ6KBlockBytes, int(k % kSuperBlock));
  }
  return 0.0f;
}

// Weights [k, k + 16) of a row (k % 16 == 0, within the row): the
// block-quantized types' SIMD loads go through this; the values are those of
// WeightAt, the scalar path's (tests compare every ISA bit for bit).
inline void Decode16(WeightType type, const uint8_t* row, int64_t k, float* out) {
  switch (type) {
    case WeightType::kQ4_0: return Decode16Q4_0Q5_0(row, k, false, out);
    case WeightType::kQ5_0: return Decode16Q4_0Q5_0(row, k, true, out);
    default:
      for (int j = 0; j < kLanes; ++j) out[j] = WeightAt(type, row, k + j);
  }
}

// Fills 16 lanes with weights [k0, k0+16) of a row and the matching x values,
// zero-padding past n. Used for the tail of a row on every ISA.
inline void LoadTail(WeightType type, const uint8_t* row, const float* x, int64_t k0, int64_t n,
                     float* w_out, float* x_out) {
  for (int j = 0; j < kLanes; ++j) {
    const int64_t k = k0 + j;
    w_out[j] = k < n ? WeightAt(type, row, k) : 0.0f;
    x_out[j] = k < n ? x[k] : 0.0f;
  }
}

// Canonical 16-lane horizontal sum (see kernel_table.h).
inline float ReduceLanes(float* lanes) {
  for (int step = kLanes / 2; step >= 1; step /= 2) {
    for (int i = 0; i < step; ++i) lanes[i] = lanes[i] + lanes[i + step];
  }
  return lanes[0];
}

}  // namespace tandem::kernels
