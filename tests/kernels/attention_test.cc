// Attention kernels: the canonical blocked order of kernel_table.h on every
// ISA (the AVX-512 tiled kernel included) bit for bit, for every K/V storage
// type; results independent of how queries and heads are grouped into calls;
// and close to a float64 softmax over the same (stored) K and V values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/half.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "support/isas.h"

namespace tandem::kernels {
namespace {

std::vector<float> Values(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(int32_t(s >> 8) % 20001 - 10000) / 5000.0f * scale;
  }
  return v;
}

using testing::IsaRestorer;
using testing::SupportedIsas;

// K and V of one layer in pages of 64 tokens (a non-identity page table), in
// the given storage type; `k`/`v` keep the values as stored, in fp32.
struct PagedKv {
  PagedKv(int64_t ctx, int kv_heads, int hd, KvType type, uint32_t seed) : type(type) {
    const int64_t width = int64_t(kv_heads) * hd;
    const int64_t n_pages = (ctx + 63) / 64;
    for (int64_t p = 0; p < n_pages; ++p) pages.push_back(int32_t(n_pages - 1 - p));
    const int64_t row_bytes = width * KvTypeBytes(type);
    kbuf.assign(size_t(n_pages * 64 * row_bytes), 0);
    vbuf = kbuf;
    rk = {kbuf.data(), pages.data(), 64 * row_bytes, row_bytes, 64};
    rv = rk;
    rv.base = vbuf.data();
    k = Values(size_t(ctx * width), seed, 3.0f);  // wide score range: exp's underflow
    v = Values(size_t(ctx * width), seed + 1, 1.0f);
    for (int64_t p = 0; p < ctx; ++p) {
      Store(k.data() + p * width, width, rk.RowBytes(p));
      Store(v.data() + p * width, width, rv.RowBytes(p));
    }
  }
  void Store(float* x, int64_t n, uint8_t* row) {
    auto* h = reinterpret_cast<uint16_t*>(row);
    for (int64_t d = 0; d < n; ++d) {
      if (type == KvType::kF32) {
        std::memcpy(row + 4 * d, &x[d], 4);
      } else if (type == KvType::kF16) {
        h[d] = FloatToF16(x[d]);
        x[d] = F16ToFloat(h[d]);
      } else {
        h[d] = FloatToBf16(x[d]);
        x[d] = Bf16ToFloat(h[d]);
      }
    }
  }
  KvType type;
  std::vector<int32_t> pages;
  std::vector<uint8_t> kbuf, vbuf;
  PagedRows rk, rv;
  std::vector<float> k, v;
};

struct Problem {
  int heads = 6, kv_heads = 2, hd = 64;
  int64_t ctx = 150;
  int n_queries = 5;  // the last n_queries positions of ctx, causally
};

std::vector<float> RunAttention(const Problem& pb, const PagedKv& kv, const std::vector<float>& q,
                       const int32_t* positions, const std::vector<int64_t>& entries, int q0, int nq,
                       int head_begin, int head_end) {
  const AttentionShape shape{pb.heads, pb.kv_heads, pb.hd, 0.3f, head_begin, head_end, kv.type};
  const int64_t width = int64_t(pb.heads) * pb.hd;
  std::vector<float> out(size_t(nq * width), -7.0f);
  std::vector<float> scratch(size_t(AttentionScratchFloats(nq, shape)), 12345.0f);
  const AttentionQueries qs{q.data() + q0 * width, width, out.data(), width, entries.data() + q0, nq};
  Attention(qs, kv.rk, kv.rv, positions, shape, scratch.data());
  return out;
}

TEST(Attention, AllIsasBitwiseEqualForEveryKvTypeHeadDimAndEntryList) {
  IsaRestorer restore;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kBF16}) {
    for (int hd : {64, 24, 128, 16, 8, 80, 48, 96, 256, 576}) {  // 576: the MLA latent row
      for (int64_t ctx : {150, 64, 37}) {
        Problem pb;
        pb.hd = hd;
        pb.ctx = ctx;
        const PagedKv kv(ctx, pb.kv_heads, hd, type, uint32_t(hd + ctx));
        const auto q = Values(size_t(pb.n_queries * pb.heads * hd), 9, 1.0f);
        std::vector<int64_t> dense(size_t(pb.n_queries));
        for (int i = 0; i < pb.n_queries; ++i) dense[size_t(i)] = ctx - pb.n_queries + 1 + i;
        std::vector<int32_t> subset;
        for (int32_t p = 0; p < ctx; p += 3) subset.push_back(p);
        std::vector<int64_t> sparse(size_t(pb.n_queries), int64_t(subset.size()));
        sparse[0] = int64_t(subset.size()) / 2;
        std::vector<float> ref_dense, ref_sparse;
        for (Isa isa : SupportedIsas()) {
          SetIsa(isa);
          const auto d = RunAttention(pb, kv, q, nullptr, dense, 0, pb.n_queries, 0, -1);
          const auto s = RunAttention(pb, kv, q, subset.data(), sparse, 0, pb.n_queries, 0, -1);
          if (ref_dense.empty()) {
            ref_dense = d;
            ref_sparse = s;
            continue;
          }
          ASSERT_EQ(0, std::memcmp(ref_dense.data(), d.data(), d.size() * 4))
              << IsaName(isa) << " kv " << int(type) << " hd " << hd << " ctx " << ctx;
          ASSERT_EQ(0, std::memcmp(ref_sparse.data(), s.data(), s.size() * 4))
              << IsaName(isa) << " kv " << int(type) << " hd " << hd << " ctx " << ctx;
        }
      }
    }
  }
}

// One query alone (decode: the tiled kernel then takes every KV head through
// each block together) against nine at once (one KV head at a time), and
// heads split across calls, dense and over a gathered entry list.
TEST(Attention, SameBitsHoweverQueriesAndHeadsAreGrouped) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kBF16}) {
    for (bool gathered : {false, true}) {
      Problem pb;
      pb.ctx = 200;
      pb.n_queries = 9;
      const PagedKv kv(pb.ctx, pb.kv_heads, pb.hd, type, 3);
      const auto q = Values(size_t(pb.n_queries * pb.heads * pb.hd), 4, 1.0f);
      std::vector<int32_t> subset;
      for (int32_t p = 1; p < pb.ctx; p += 2) subset.push_back(p);
      std::vector<int64_t> entries(size_t(pb.n_queries));
      for (int i = 0; i < pb.n_queries; ++i) {
        entries[size_t(i)] = gathered ? int64_t(subset.size()) - 5 * (pb.n_queries - 1 - i) : pb.ctx - 8 * (pb.n_queries - 1 - i);
      }
      const int32_t* positions = gathered ? subset.data() : nullptr;
      const auto all = RunAttention(pb, kv, q, positions, entries, 0, pb.n_queries, 0, -1);
      const int64_t width = int64_t(pb.heads) * pb.hd;
      for (int i = 0; i < pb.n_queries; ++i) {
        SCOPED_TRACE(std::string(gathered ? "gathered" : "dense") + " kv " + std::to_string(int(type)) + " query " +
                     std::to_string(i));
        const auto one = RunAttention(pb, kv, q, positions, entries, i, 1, 0, -1);
        ASSERT_EQ(0, std::memcmp(one.data(), all.data() + i * width, size_t(width) * 4));
        // Heads split unevenly across calls (across KV groups too).
        std::vector<float> split(static_cast<size_t>(width));
        for (auto [h0, h1] : {std::pair{0, 1}, {1, 4}, {4, 6}}) {
          const auto part = RunAttention(pb, kv, q, positions, entries, i, 1, h0, h1);
          std::memcpy(split.data() + h0 * pb.hd, part.data() + h0 * pb.hd, size_t((h1 - h0) * pb.hd) * 4);
          if (h0 > 0) {
            EXPECT_EQ(part[0], -7.0f) << "heads before head_begin are untouched";
          }
        }
        ASSERT_EQ(0, std::memcmp(split.data(), all.data() + i * width, size_t(width) * 4));
      }
    }
  }
}

TEST(Attention, CloseToFloat64SoftmaxOverTheStoredValues) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kBF16}) {
    Problem pb;
    pb.ctx = 300;
    const PagedKv kv(pb.ctx, pb.kv_heads, pb.hd, type, 8);
    const auto q = Values(size_t(pb.n_queries * pb.heads * pb.hd), 2, 1.0f);
    std::vector<int64_t> entries(size_t(pb.n_queries));
    for (int i = 0; i < pb.n_queries; ++i) entries[size_t(i)] = pb.ctx - 60 * i;
    const auto out = RunAttention(pb, kv, q, nullptr, entries, 0, pb.n_queries, 0, -1);
    const int group = pb.heads / pb.kv_heads, width = pb.heads * pb.hd, kvw = pb.kv_heads * pb.hd;
    for (int i = 0; i < pb.n_queries; ++i) {
      for (int h = 0; h < pb.heads; ++h) {
        const float* qh = q.data() + i * width + h * pb.hd;
        const int off = (h / group) * pb.hd;
        std::vector<double> s(static_cast<size_t>(entries[size_t(i)]));
        double mx = -1e300, sum = 0;
        for (size_t p = 0; p < s.size(); ++p) {
          double d = 0;
          for (int e = 0; e < pb.hd; ++e) d += double(qh[e]) * kv.k[p * size_t(kvw) + size_t(off + e)];
          s[p] = d * 0.3;
          mx = std::max(mx, s[p]);
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int e = 0; e < pb.hd; ++e) {
          double o = 0;
          for (size_t p = 0; p < s.size(); ++p) o += s[p] / sum * kv.v[p * size_t(kvw) + size_t(off + e)];
          EXPECT_NEAR(out[size_t(i * width + h * pb.hd + e)], o, 1e-5) << "query " << i << " head " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
