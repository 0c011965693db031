#include "cache/registry.h"

#include <gtest/gtest.h>

#include <cstring>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "faults/page_poison.h"
#include "model/cache_spec.h"

namespace tandem {
namespace {

TEST(Registry, IndexKPageSizesComeFromTheRegistry) {
  ModelConfig c;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  AttentionOptions a;
  a.kind = AttentionKind::kSparse;
  a.index_k_dtype = CacheDType::kFp8E4M3Scaled;
  auto fp8 = MakeCacheSpec(c, a);
  ASSERT_TRUE(fp8.ok());
  a.index_k_dtype = CacheDType::kBF16;
  auto bf16 = MakeCacheSpec(c, a);
  ASSERT_TRUE(bf16.ok());
  CacheLayout l8(fp8->registry, 5, 4), l16(bf16->registry, 5, 4);
  EXPECT_EQ(l8.page_stride(fp8->index_k), 8448);
  EXPECT_EQ(l16.page_stride(bf16->index_k), 16384);
  EXPECT_EQ(l8.page_stride(fp8->k), 64 * 32 * 2);  // K and V are f16 unless asked otherwise
  EXPECT_EQ(l8.scale_offset(fp8->index_k), 64 * 128);
  EXPECT_EQ(l16.scale_offset(bf16->index_k), -1);
  EXPECT_NE(l8.Fingerprint(), l16.Fingerprint());
  EXPECT_NE(l8.Fingerprint().find("index_k:fp8"), std::string::npos) << l8.Fingerprint();
  // Dense attention keeps no index-K buffer at all.
  auto dense = MakeCacheSpec(c);
  EXPECT_EQ(dense->index_k, -1);
  EXPECT_EQ(dense->registry.size(), 2);
}

TEST(Registry, RejectsDuplicatesAndEmptyBuffers) {
  CacheBufferRegistry r;
  EXPECT_TRUE(r.Register({"k", CacheDType::kF32, 8}).ok());
  EXPECT_FALSE(r.Register({"k", CacheDType::kF32, 8}).ok());
  EXPECT_FALSE(r.Register({"", CacheDType::kF32, 8}).ok());
  EXPECT_FALSE(r.Register({"z", CacheDType::kF32, 0}).ok());
}

TEST(PagePool, ReservationsAndGenerationsKeepAccounting) {
  CacheBufferRegistry r;
  ASSERT_TRUE(r.Register({"k", CacheDType::kF32, 4}).ok());
  PagePool pool(r, 2, 10);
  const auto baseline = pool.accounting();
  auto used = *pool.Allocate(3);
  auto reserved = *pool.Reserve(4);
  EXPECT_EQ(pool.accounting(), (PagePool::Accounting{3, 3, 4, 10}));
  EXPECT_TRUE(pool.CheckAccounting().ok());
  EXPECT_FALSE(pool.Allocate(4).ok()) << "only 3 free";
  EXPECT_EQ(pool.accounting(), (PagePool::Accounting{3, 3, 4, 10})) << "a failed allocation changes nothing";
  const uint32_t gen = pool.Generation(reserved[0]);
  pool.CancelReservation(std::span<const int32_t>(reserved).first(2));
  EXPECT_EQ(pool.Generation(reserved[0]), gen + 1);
  pool.CommitReservation(std::span<const int32_t>(reserved).subspan(2));
  EXPECT_EQ(pool.RefCount(reserved[2]), 1);
  EXPECT_EQ(pool.accounting(), (PagePool::Accounting{5, 5, 0, 10}));
  pool.Release(used);
  pool.Release(std::span<const int32_t>(reserved).subspan(2));
  EXPECT_EQ(pool.accounting(), baseline);
  EXPECT_TRUE(pool.CheckAccounting().ok());
}

// --debug-poison-pages: a freed, cancelled or reserved page holds only the
// poison byte in every buffer of every layer; a page still referenced keeps
// its bytes; off, nothing is written.
TEST(PagePool, DebugPoisonScribblesFreedAndReservedPagesOnly) {
  CacheBufferRegistry r;
  ASSERT_TRUE(r.Register({"k", CacheDType::kF32, 4}).ok());
  ASSERT_TRUE(r.Register({"index_k", CacheDType::kFp8E4M3Scaled, 128}).ok());
  auto fill = [](PagePool& pool, int32_t page, uint8_t byte) {
    for (int b = 0; b < pool.layout().n_buffers(); ++b) {
      for (int l = 0; l < pool.layout().n_layers(); ++l) {
        std::memset(pool.Segment(CacheBufferId(b), l, page), byte, size_t(pool.layout().page_stride(CacheBufferId(b))));
      }
    }
  };
  auto all_equal = [](PagePool& pool, int32_t page, uint8_t byte) {
    for (int b = 0; b < pool.layout().n_buffers(); ++b) {
      for (int l = 0; l < pool.layout().n_layers(); ++l) {
        const uint8_t* p = pool.Segment(CacheBufferId(b), l, page);
        for (int64_t i = 0; i < pool.layout().page_stride(CacheBufferId(b)); ++i) {
          if (p[i] != byte) return false;
        }
      }
    }
    return true;
  };
  for (bool poison : {false, true}) {
    PagePool pool(r, 3, 6);
    if (poison) pool.SetPageHook(faults::PoisonPages());  // the fault library's poisoning (faults/page_poison.h)
    auto pages = *pool.Allocate(3);
    for (int32_t p : pages) fill(pool, p, 0x11);
    pool.AddRef(std::span<const int32_t>(pages).first(1));
    pool.Release(pages);  // page 0 is still referenced, 1 and 2 are freed
    EXPECT_TRUE(all_equal(pool, pages[0], 0x11)) << "a referenced page is never touched";
    const uint8_t freed = poison ? faults::kPoisonByte : 0x11;
    EXPECT_TRUE(all_equal(pool, pages[1], freed) && all_equal(pool, pages[2], freed)) << "poison " << poison;
    pool.Release(std::span<const int32_t>(pages).first(1));
    EXPECT_TRUE(all_equal(pool, pages[0], freed));
    // Reserve: scribbled again (a late write into a free page is gone), and
    // a cancelled reservation is scribbled over whatever landed.
    auto reserved = *pool.Reserve(2);
    for (int32_t p : reserved) fill(pool, p, 0x22);
    pool.CancelReservation(reserved);
    EXPECT_TRUE(all_equal(pool, reserved[0], poison ? faults::kPoisonByte : 0x22));
    fill(pool, reserved[1], 0x33);  // written while free
    auto again = *pool.Reserve(pool.free_pages());
    for (int32_t p : again) {
      if (poison) {
        EXPECT_TRUE(all_equal(pool, p, faults::kPoisonByte)) << "page " << p;
      }
      if (!poison && p == reserved[1]) {
        EXPECT_TRUE(all_equal(pool, p, 0x33)) << "off: nothing is written";
      }
    }
    pool.CancelReservation(again);
    EXPECT_TRUE(pool.CheckAccounting().ok());
  }
}

}  // namespace
}  // namespace tandem
