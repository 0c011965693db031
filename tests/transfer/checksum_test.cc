// Per-buffer digests: equal for equal content whatever the page ids, changed
// by any single flipped byte of a covered row or scale (of every buffer,
// including one registered only in this test), and blind to bytes outside
// the token range.
#include "transfer/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <random>

#include "cache/page_copy.h"

namespace tandem {
namespace {

constexpr int kLayers = 2;
constexpr int64_t kFirstToken = 70;  // inside page 1: its first 6 rows are not covered
constexpr int64_t kEndToken = 200;   // inside page 3: its last 56 rows are not covered
constexpr int kSequencePages = 4;

CacheBufferRegistry MakeRegistry() {
  CacheBufferRegistry registry;
  EXPECT_TRUE(registry.Register({"k", CacheDType::kF32, 8}).ok());
  EXPECT_TRUE(registry.Register({"v", CacheDType::kBF16, 8}).ok());
  EXPECT_TRUE(registry.Register({"index_k", CacheDType::kFp8E4M3Scaled, 16}).ok());
  return registry;
}

// A registry as a future model would extend it: the digests cover the new
// buffer with no change to checksum.cc.
CacheBufferRegistry MakeExtendedRegistry() {
  CacheBufferRegistry registry = MakeRegistry();
  EXPECT_TRUE(registry.Register({"future_state", CacheDType::kBF16, 5}).ok());
  return registry;
}

// Which token a byte of a page segment belongs to (row or scale), by the
// layout alone.
int64_t SlotOfByte(const CacheLayout& layout, CacheBufferId b, int64_t offset) {
  const int64_t rows_end = layout.row_bytes(b) * kPageTokens;
  if (offset < rows_end) return offset / layout.row_bytes(b);
  EXPECT_GE(layout.scale_offset(b), 0);
  return (offset - layout.scale_offset(b)) / 4;
}

bool Covered(int64_t token) { return token >= kFirstToken && token < kEndToken; }

// Covered bytes get a pattern of (buffer, layer, token, byte); uncovered ones
// random noise, different in every pool.
void Fill(PagePool& pool, std::span<const int32_t> pages, std::mt19937_64& noise) {
  const CacheLayout& layout = pool.layout();
  for (size_t i = 0; i < pages.size(); ++i) {
    ForEachSegment(layout, [&](CacheBufferId b, int l, int64_t bytes) {
      uint8_t* segment = pool.Segment(b, l, pages[i]);
      for (int64_t off = 0; off < bytes; ++off) {
        const int64_t token = int64_t(i) * kPageTokens + SlotOfByte(layout, b, off);
        segment[off] =
            Covered(token) ? uint8_t(b * 59 + l * 17 + token * 5 + off * 3 + 1) : uint8_t(noise());
      }
    });
  }
}

struct Sequence {
  std::unique_ptr<PagePool> pool;
  std::vector<int32_t> pages;
};

// A pool holding the test sequence in pages that depend on `taken_first`
// (pages allocated and kept before the sequence's) and on `reverse`.
Sequence MakeSequence(const CacheBufferRegistry& registry, int taken_first, bool reverse,
                      uint64_t noise_seed) {
  Sequence s;
  s.pool = std::make_unique<PagePool>(registry, kLayers, 12);
  EXPECT_TRUE(s.pool->Allocate(taken_first).ok());
  s.pages = *s.pool->Allocate(kSequencePages);
  if (reverse) std::reverse(s.pages.begin(), s.pages.end());
  std::mt19937_64 noise(noise_seed);
  Fill(*s.pool, s.pages, noise);
  return s;
}

std::vector<BufferDigest> Digest(Sequence& s) {
  return DigestPages(*s.pool, s.pages, kFirstToken, kEndToken);
}

TEST(DigestPages, OneDigestPerBufferInRegistryOrderWithByteCounts) {
  const CacheBufferRegistry registry = MakeExtendedRegistry();
  Sequence s = MakeSequence(registry, 0, false, 1);
  const std::vector<BufferDigest> digests = Digest(s);
  ASSERT_EQ(digests.size(), registry.buffers().size());
  for (size_t b = 0; b < digests.size(); ++b) {
    EXPECT_EQ(digests[b].name, registry.buffers()[b].name);
    EXPECT_EQ(digests[b].bytes, uint64_t((kEndToken - kFirstToken) *
                                         registry.buffers()[b].BytesPerToken() * kLayers));
  }
}

TEST(DigestPages, IsXxh3OfCoveredBytesInLayerPageOrder) {
  const CacheBufferRegistry registry = MakeExtendedRegistry();
  Sequence s = MakeSequence(registry, 3, true, 2);
  const CacheLayout& layout = s.pool->layout();
  const std::vector<BufferDigest> digests = Digest(s);
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    std::vector<uint8_t> rows, scales, expected;
    for (int l = 0; l < kLayers; ++l) {
      for (int64_t i = kFirstToken / kPageTokens; i * kPageTokens < kEndToken; ++i) {
        const uint8_t* segment = s.pool->Segment(b, l, s.pages[size_t(i)]);
        for (int64_t off = 0; off < layout.page_stride(b); ++off) {
          const int64_t token = i * kPageTokens + SlotOfByte(layout, b, off);
          if (!Covered(token)) continue;
          (off < layout.row_bytes(b) * kPageTokens ? rows : scales).push_back(segment[off]);
        }
        expected.insert(expected.end(), rows.begin(), rows.end());
        expected.insert(expected.end(), scales.begin(), scales.end());
        rows.clear();
        scales.clear();
      }
    }
    EXPECT_EQ(digests[size_t(b)].xxh3, XXH3_64bits(expected.data(), expected.size()))
        << layout.spec(b).name;
    EXPECT_EQ(digests[size_t(b)].bytes, expected.size());
  }
}

TEST(DigestPages, SameContentInDifferentPagesHasSameDigests) {
  for (const CacheBufferRegistry& registry : {MakeRegistry(), MakeExtendedRegistry()}) {
    Sequence a = MakeSequence(registry, 0, false, 11);
    Sequence b = MakeSequence(registry, 5, true, 12);
    ASSERT_NE(a.pages, b.pages);
    EXPECT_EQ(Digest(a), Digest(b));
    EXPECT_TRUE(VerifyDigests(Digest(a), Digest(b)).ok());
  }
}

// Flips every byte of every page segment of the sequence, one at a time: a
// covered byte changes its own buffer's digest and no other; an uncovered one
// changes nothing.
TEST(DigestPages, EveryCoveredByteCountsAndNoOtherDoes) {
  const CacheBufferRegistry registry = MakeExtendedRegistry();
  Sequence s = MakeSequence(registry, 1, false, 3);
  const CacheLayout& layout = s.pool->layout();
  const std::vector<BufferDigest> clean = Digest(s);
  std::vector<int64_t> covered_flips(size_t(layout.n_buffers())), scale_flips(covered_flips);
  int64_t uncovered_flips = 0;
  for (size_t i = 0; i < s.pages.size(); ++i) {
    ForEachSegment(layout, [&](CacheBufferId b, int l, int64_t bytes) {
      uint8_t* segment = s.pool->Segment(b, l, s.pages[i]);
      for (int64_t off = 0; off < bytes; ++off) {
        const int64_t token = int64_t(i) * kPageTokens + SlotOfByte(layout, b, off);
        segment[off] ^= 0x10;
        const std::vector<BufferDigest> flipped = Digest(s);
        segment[off] ^= 0x10;
        for (CacheBufferId other = 0; other < layout.n_buffers(); ++other) {
          const bool should_change = Covered(token) && other == b;
          ASSERT_EQ(flipped[size_t(other)].xxh3 != clean[size_t(other)].xxh3, should_change)
              << layout.spec(b).name << " layer " << l << " page " << i << " byte " << off
              << " (token " << token << "), digest of " << layout.spec(other).name;
        }
        if (!Covered(token)) {
          ++uncovered_flips;
        } else {
          ++covered_flips[size_t(b)];
          if (off >= layout.row_bytes(b) * kPageTokens) ++scale_flips[size_t(b)];
        }
      }
    });
  }
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    EXPECT_EQ(covered_flips[size_t(b)], int64_t(clean[size_t(b)].bytes));
    const bool has_scales = layout.scale_offset(b) >= 0;
    EXPECT_EQ(scale_flips[size_t(b)], has_scales ? (kEndToken - kFirstToken) * 4 * kLayers : 0);
  }
  EXPECT_GT(uncovered_flips, 0);
  EXPECT_GT(scale_flips[2], 0);  // index_k, the fp8 buffer
}

TEST(DigestPages, PagesOutsideTheRangeAreNotRead) {
  const CacheBufferRegistry registry = MakeRegistry();
  Sequence s = MakeSequence(registry, 0, false, 4);
  const std::vector<BufferDigest> clean = Digest(s);
  // Page 0 holds only tokens before kFirstToken; point it anywhere else.
  std::vector<int32_t> other = s.pages;
  other[0] = 11;
  EXPECT_EQ(DigestPages(*s.pool, other, kFirstToken, kEndToken), clean);
}

TEST(DigestPages, EmptyRange) {
  const CacheBufferRegistry registry = MakeRegistry();
  Sequence s = MakeSequence(registry, 0, false, 5);
  for (int64_t at : {int64_t(0), int64_t(64), int64_t(70), int64_t(256)}) {
    const std::vector<BufferDigest> digests = DigestPages(*s.pool, s.pages, at, at);
    ASSERT_EQ(digests.size(), 3u);
    for (const BufferDigest& d : digests) {
      EXPECT_EQ(d.bytes, 0u);
      EXPECT_EQ(d.xxh3, XXH3_64bits(nullptr, 0));
    }
  }
}

TEST(VerifyDigests, NamesTheBufferThatDiffers) {
  const std::vector<BufferDigest> here = {{"k", 1, 100}, {"v", 2, 100}, {"index_k", 3, 50}};
  EXPECT_TRUE(VerifyDigests(here, here).ok());

  auto sent = here;
  sent[2].xxh3 = 4;
  Status s = VerifyDigests(sent, here);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "index_k digest mismatch");

  sent = here;
  sent[1].bytes = 99;
  s = VerifyDigests(sent, here);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("v byte count mismatch"), std::string::npos) << s.message();

  sent = here;
  std::swap(sent[0], sent[1]);
  s = VerifyDigests(sent, here);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("'k' here but 'v'"), std::string::npos) << s.message();

  sent = here;
  sent.push_back({"future_state", 5, 10});
  s = VerifyDigests(sent, here);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("4 buffer digests"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tandem
