#include "model/quantize.h"

#include <algorithm>
#include <cmath>

#include "common/half.h"
#include "common/status.h"
#include "kernels/quant_blocks.h"

namespace tandem {
namespace {

void PutHalf(std::vector<uint8_t>& out, float v) {
  const uint16_t h = FloatToF16(v);
  out.push_back(uint8_t(h & 0xff));
  out.push_back(uint8_t(h >> 8));
}

// The signed value of largest magnitude.
float SignedMax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::fabs(x[i]) > std::fabs(m) ? x[i] : m;
  return m;
}

int Quant(float x, float inv, int offset, int top) {
  return std::clamp(int(std::nearbyint(x * inv)) + offset, 0, top);
}

// Q4_0 (levels 16) and Q5_0 (32): w = d * (q - levels / 2).
void Q40Q50(const float* x, bool five, std::vector<uint8_t>& out) {
  const int half = five ? 16 : 8;
  const float d = F16ToFloat(FloatToF16(SignedMax(x, 32) / -float(half)));
  const float inv = d == 0 ? 0 : 1.0f / d;
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = Quant(x[i], inv, half, 2 * half - 1);
  PutHalf(out, d);
  if (five) {
    uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) qh |= uint32_t(q[i] >> 4) << i;
    for (int b = 0; b < 4; ++b) out.push_back(uint8_t(qh >> (8 * b)));
  }
  for (int i = 0; i < 16; ++i) out.push_back(uint8_t((q[i] & 0xf) | (q[i + 16] & 0xf) << 4));
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scale and min under f16 d, dmin.
void Q45K(const float* x, bool five, std::vector<uint8_t>& out) {
  const int top = five ? 31 : 15;
  float scale[8], min[8];
  for (int s = 0; s < 8; ++s) {
    const float* v = x + 32 * s;
    const float lo = std::min(0.0f, *std::min_element(v, v + 32));
    const float hi = *std::max_element(v, v + 32);
    scale[s] = (hi - lo) / float(top);
    min[s] = -lo;
  }
  const float d = F16ToFloat(FloatToF16(*std::max_element(scale, scale + 8) / 63.0f));
  const float dmin = F16ToFloat(FloatToF16(*std::max_element(min, min + 8) / 63.0f));
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d == 0 ? 0 : std::clamp(int(std::nearbyint(scale[s] / d)), 0, 63);
    m[s] = dmin == 0 ? 0 : std::clamp(int(std::nearbyint(min[s] / dmin)), 0, 63);
  }
  PutHalf(out, d);
  PutHalf(out, dmin);
  for (int j = 0; j < 4; ++j) out.push_back(uint8_t(sc[j] | (sc[j + 4] >> 4) << 6));
  for (int j = 0; j < 4; ++j) out.push_back(uint8_t(m[j] | (m[j + 4] >> 4) << 6));
  for (int j = 0; j < 4; ++j) out.push_back(uint8_t((sc[j + 4] & 0xf) | (m[j + 4] & 0xf) << 4));
  int q[256];
  for (int k = 0; k < 256; ++k) {
    const int s = k / 32;
    const float step = d * float(sc[s]);
    q[k] = step == 0 ? 0 : Quant(x[k] + dmin * float(m[s]), 1.0f / step, 0, top);
  }
  if (five) {
    for (int l = 0; l < 32; ++l) {
      uint8_t h = 0;
      for (int s = 0; s < 8; ++s) h |= uint8_t((q[32 * s + l] >> 4) << s);
      out.push_back(h);
    }
  }
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) out.push_back(uint8_t((q[64 * c + l] & 0xf) | (q[64 * c + 32 + l] & 0xf) << 4));
  }
}

// Q6_K: 16 sub-blocks of 16 with int8 scales under one f16 d; q in [0, 63] - 32.
void Q6K(const float* x, std::vector<uint8_t>& out) {
  float scale[16];
  float amax = 0;
  for (int s = 0; s < 16; ++s) {
    scale[s] = SignedMax(x + 16 * s, 16) / -32.0f;
    amax = std::max(amax, std::fabs(scale[s]));
  }
  const float d = F16ToFloat(FloatToF16(amax / 127.0f));
  int8_t sc[16];
  for (int s = 0; s < 16; ++s) sc[s] = int8_t(d == 0 ? 0 : std::clamp(int(std::nearbyint(scale[s] / d)), -128, 127));
  int q[256];
  for (int k = 0; k < 256; ++k) {
    const float step = d * float(sc[k / 16]);
    q[k] = step == 0 ? 32 : Quant(x[k], 1.0f / step, 32, 63);
  }
  uint8_t ql[128], qh[64];
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int* v = q + 128 * h + l;
      ql[64 * h + l] = uint8_t((v[0] & 0xf) | (v[64] & 0xf) << 4);
      ql[64 * h + 32 + l] = uint8_t((v[32] & 0xf) | (v[96] & 0xf) << 4);
      qh[32 * h + l] = uint8_t((v[0] >> 4) | (v[32] >> 4) << 2 | (v[64] >> 4) << 4 | (v[96] >> 4) << 6);
    }
  }
  out.insert(out.end(), ql, ql + 128);
  out.insert(out.end(), qh, qh + 64);
  for (int s = 0; s < 16; ++s) out.push_back(uint8_t(sc[s]));
  PutHalf(out, d);
}

}  // namespace

void QuantizeBlocks(TensorType type, const float* x, int64_t n, std::vector<uint8_t>& out) {
  const int64_t block = type == TensorType::kQ4_0 || type == TensorType::kQ5_0 ? 32 : kernels::kSuperBlock;
  TANDEM_CHECK_MSG(n % block == 0, "QuantizeBlocks needs whole blocks");
  float v[kernels::kSuperBlock];
  for (int64_t b = 0; b < n; b += block) {
    for (int64_t i = 0; i < block; ++i) v[i] = std::isfinite(x[b + i]) ? x[b + i] : 0.0f;  // NaN/inf: 0
    switch (type) {
      case TensorType::kQ4_0: Q40Q50(v, false, out); break;
      case TensorType::kQ5_0: Q40Q50(v, true, out); break;
      case TensorType::kQ4_K: Q45K(v, false, out); break;
      case TensorType::kQ5_K: Q45K(v, true, out); break;
      case TensorType::kQ6_K: Q6K(v, out); break;
      default: TANDEM_CHECK_MSG(false, "QuantizeBlocks: not a block-quantized type");
    }
  }
}

}  // namespace tandem
