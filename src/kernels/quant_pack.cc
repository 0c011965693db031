#include "kernels/quant_pack.h"

#include <cstdlib>
#include <cstring>

#include "kernels/quant_dot.h"

namespace tandem::kernels {
namespace {

// The unsigned codes of one block's elements (4, 5 or 6 bits; Q8_0's bytes
// as stored), in element order.
void BlockCodes(WeightType type, const uint8_t* b, uint8_t* codes) {
  switch (type) {
    case WeightType::kQ8_0: std::memcpy(codes, b + 2, 32); return;
    case WeightType::kQ4_0:
    case WeightType::kQ5_0: {
      const bool five = type == WeightType::kQ5_0;
      const uint32_t qh = five ? uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24 : 0;
      const uint8_t* qs = b + (five ? 6 : 2);
      for (int k = 0; k < 32; ++k) {
        int q = k < 16 ? qs[k] & 0xf : qs[k - 16] >> 4;
        if (five) q |= int((qh >> k) & 1) << 4;
        codes[k] = uint8_t(q);
      }
      return;
    }
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const bool five = type == WeightType::kQ5_K;
      const uint8_t* qs = b + 16 + (five ? 32 : 0);
      for (int k = 0; k < 256; ++k) {
        const int j = k / 32, l = k % 32;
        const uint8_t byte = qs[32 * (j / 2) + l];
        int q = j % 2 == 0 ? byte & 0xf : byte >> 4;
        if (five) q += ((b[16 + l] >> j) & 1) * 16;
        codes[k] = uint8_t(q);
      }
      return;
    }
    case WeightType::kQ6_K:
      for (int k = 0; k < 256; ++k) {
        const int half = k / 128, quarter = (k % 128) / 32, l = k % 32;
        const uint8_t ql = b[half * 64 + l + (quarter & 1) * 32];
        const uint8_t qh = b[128 + half * 32 + l];
        codes[k] = uint8_t((quarter < 2 ? ql & 0xf : ql >> 4) | ((qh >> (2 * quarter)) & 3) << 4);
      }
      return;
    default: return;
  }
}

// A 32-element run of 16 rows (codes[r] + 32 * run) as NV_0..3 at out.
void PutNibbles(const uint8_t (*codes)[256], int run, uint8_t* out) {
  for (int h = 0; h < 4; ++h)
    for (int r = 0; r < kPackRows; ++r)
      for (int c = 0; c < 4; ++c) {
        const uint8_t* e = codes[r] + 32 * run;
        out[64 * h + 4 * r + c] = uint8_t((e[4 * h + c] & 0xf) | (e[16 + 4 * h + c] & 0xf) << 4);
      }
}

void PutFifthBits(const uint8_t (*codes)[256], int run, uint8_t* out) {
  for (int r = 0; r < kPackRows; ++r)
    for (int c = 0; c < 4; ++c) {
      const uint8_t* e = codes[r] + 32 * run;
      int v = 0;
      for (int h = 0; h < 8; ++h) v |= ((e[4 * h + c] >> 4) & 1) << h;
      out[4 * r + c] = uint8_t(v);
    }
}

void PutHalf(uint8_t* out, const uint8_t* half_bytes) {
  out[0] = half_bytes[0];
  out[1] = half_bytes[1];
}

}  // namespace

void PackRows(const WeightMatrix& w, int64_t r0, int64_t r1, uint8_t* out) {
  const WeightType type = w.type;
  const int block = ActBlockFor(type), bytes = WeightBlockBytes(type), rec = PackedRecordBytes(type);
  const PackedOffsets off = PackedOffsetsOf(type);
  const int64_t nb = w.cols / block;
  uint8_t codes[kPackRows][256];
  for (int64_t g = r0; g < r1; g += kPackRows) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + ((g - r0) / kPackRows * nb + b) * rec;
      std::memset(o, 0, size_t(rec));
      std::memset(codes, 0, sizeof codes);
      for (int r = 0; r < kPackRows && g + r < r1; ++r) {
        const uint8_t* src = w.data + (g + r) * int64_t(w.row_bytes) + b * bytes;
        BlockCodes(type, src, codes[r]);
        switch (type) {
          case WeightType::kQ8_0:
          case WeightType::kQ4_0:
          case WeightType::kQ5_0: PutHalf(o + off.d + 2 * r, src); break;
          case WeightType::kQ4_K:
          case WeightType::kQ5_K: {
            uint8_t sm[16];
            ScalesMinsK4(src + 4, sm);
            for (int j = 0; j < 8; ++j) {
              o[off.scales + 16 * j + r] = sm[j];
              o[off.mins + 16 * j + r] = sm[8 + j];
            }
            PutHalf(o + off.d + 2 * r, src);
            PutHalf(o + off.dmin + 2 * r, src + 2);
            break;
          }
          case WeightType::kQ6_K:
            for (int g16 = 0; g16 < 16; ++g16) o[off.scales + 32 * (g16 / 2) + 2 * r + g16 % 2] = src[192 + g16];
            PutHalf(o + off.d + 2 * r, src + 208);
            break;
          default: break;
        }
      }
      switch (type) {
        case WeightType::kQ8_0:
          for (int h = 0; h < 8; ++h)
            for (int r = 0; r < kPackRows; ++r)
              for (int c = 0; c < 4; ++c) o[64 * h + 4 * r + c] = codes[r][4 * h + c];
          break;
        case WeightType::kQ4_0: PutNibbles(codes, 0, o); break;
        case WeightType::kQ5_0:
          PutNibbles(codes, 0, o);
          PutFifthBits(codes, 0, o + off.hb);
          break;
        case WeightType::kQ4_K:
        case WeightType::kQ5_K:
          for (int j = 0; j < 8; ++j) {
            PutNibbles(codes, j, o + 256 * j);
            if (type == WeightType::kQ5_K) PutFifthBits(codes, j, o + off.hb + 64 * j);
          }
          break;
        case WeightType::kQ6_K:
          for (int u = 0; u < 8; ++u) {
            PutNibbles(codes, u, o + 256 * u);
            for (int s = 0; s < 2; ++s)
              for (int r = 0; r < kPackRows; ++r)
                for (int c = 0; c < 4; ++c) {
                  int v = 0;
                  for (int i = 0; i < 4; ++i) v |= ((codes[r][32 * u + 4 * (4 * s + i) + c] >> 4) & 3) << (2 * i);
                  o[off.hb + 128 * u + 64 * s + 4 * r + c] = uint8_t(v);
                }
          }
          break;
        default: break;
      }
    }
  }
}

QuantizedActs ActStorage::Reserve(int n, int64_t cols, int block) {
  const size_t elems = size_t(n) * size_t(cols);
  if (q.size() < elems) q.resize(elems);
  if (d.size() < elems / size_t(block)) d.resize(elems / size_t(block));
  if (sums.size() < elems / 16) sums.resize(elems / 16);
  return {q.data(), d.data(), sums.data(), cols, block};
}

void PackedWeights::Free::operator()(uint8_t* p) const { std::free(p); }

PackedWeights::PackedWeights(const WeightMatrix& w, bool fill) {
  if (PackedRecordBytes(w.type) == 0 || w.cols % ActBlockFor(w.type) != 0) return;
  size_ = PackedBytes(w.type, w.rows, w.cols, ActBlockFor(w.type));
  const size_t alloc = (size_ + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, alloc == 0 ? 64 : alloc));
  if (p == nullptr) return;  // data() null, size() not 0: the caller reports it
  bytes_.reset(p);
  if (fill) PackRows(w, 0, w.rows, p);
}

}  // namespace tandem::kernels
