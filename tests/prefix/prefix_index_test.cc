#include "prefix/prefix_index.h"

#include "common/chain_key.h"

#include <gtest/gtest.h>

#include <vector>

namespace tandem {
namespace {

constexpr int64_t kPage = kPageTokens;

// n tokens, distinct per `seed` so different seeds never share a page.
std::vector<int32_t> Tokens(int64_t n, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = seed * 100000 + int32_t(i);
  return t;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class PrefixIndexTest : public ::testing::Test {
 protected:
  PrefixIndexTest() : registry_(MakeRegistry()), pool_(registry_, 2, 32) {}

  static CacheBufferRegistry MakeRegistry() {
    CacheBufferRegistry r;
    EXPECT_TRUE(r.Register({"k", CacheDType::kF32, 8}).ok());
    return r;
  }

  std::vector<int32_t> Allocate(int64_t n) {
    auto pages = pool_.Allocate(n);
    EXPECT_TRUE(pages.ok()) << pages.status().ToString();
    return pages.ok() ? *pages : std::vector<int32_t>();
  }

  // A sequence computed from scratch and indexed; the caller's references are
  // dropped, so the index is the pages' only holder.
  std::vector<int32_t> Cache(PrefixIndex& index, const std::vector<int32_t>& tokens) {
    std::vector<int32_t> pages = Allocate((int64_t(tokens.size()) + kPage - 1) / kPage);
    index.Insert(tokens, pages);
    pool_.Release(pages);
    return pages;
  }

  void ExpectBaseline() {
    EXPECT_EQ(pool_.free_pages(), pool_.total_pages());
    EXPECT_TRUE(pool_.CheckAccounting().ok()) << pool_.CheckAccounting().ToString();
  }

  CacheBufferRegistry registry_;
  PagePool pool_;
};

TEST_F(PrefixIndexTest, LookupMissesOnEmptyIndex) {
  PrefixIndex index(pool_);
  const auto tokens = Tokens(200, 1);
  const PrefixIndex::Match m = index.Lookup(tokens, int64_t(tokens.size()) - 1);
  EXPECT_TRUE(m.pages.empty());
  EXPECT_EQ(m.tokens, 0);
  EXPECT_EQ(index.stats().lookups, 1);
  EXPECT_EQ(index.stats().lookup_tokens, 200);
  EXPECT_EQ(index.stats().hit_tokens, 0);
}

TEST_F(PrefixIndexTest, InsertIndexesFullPagesAndLookupReturnsThemWithCallerRefs) {
  PrefixIndex index(pool_);
  const auto tokens = Tokens(3 * kPage + 10, 1);  // 3 full pages and a partial one
  const auto pages = Allocate(4);
  EXPECT_EQ(index.Insert(tokens, pages), 3);
  EXPECT_EQ(index.cached_pages(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pool_.RefCount(pages[size_t(i)]), 2);
  EXPECT_EQ(pool_.RefCount(pages[3]), 1);  // the partial page is indexed only with_partial

  const auto m = index.Lookup(tokens, int64_t(tokens.size()) - 1);
  EXPECT_EQ(m.pages, std::vector<int32_t>(pages.begin(), pages.begin() + 3));
  EXPECT_EQ(m.tokens, 3 * kPage);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pool_.RefCount(pages[size_t(i)]), 3);
  EXPECT_EQ(index.stats().hit_tokens, 3 * kPage);
  EXPECT_EQ(index.stats().inserted_pages, 3);

  // Pages held by the caller cannot be evicted.
  EXPECT_EQ(index.evictable_pages(), 0);
  EXPECT_EQ(index.Evict(10), 0);
  pool_.Release(m.pages);
  pool_.Release(pages);
  EXPECT_EQ(index.evictable_pages(), 3);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
  index.Clear();
  ExpectBaseline();
}

// A retiring sequence's last partial page is kept (with_partial) after its
// chain; a lookup that asks gets the longest run of its tokens the request
// shares, capped by max_tokens, with a reference of its own. Partial pages are
// evicted first, go with their parent, and are released by Clear.
TEST_F(PrefixIndexTest, PartialPagesAreReusedToTheTokenAndEvictedFirst) {
  PrefixIndex index(pool_);
  const auto tokens = Tokens(2 * kPage + 20, 1);
  const auto pages = Allocate(3);
  EXPECT_EQ(index.Insert(tokens, pages, /*with_partial=*/true), 2);
  pool_.Release(pages);
  EXPECT_EQ(index.cached_pages(), 3);
  EXPECT_EQ(index.partial_pages(), 1);
  EXPECT_EQ(pool_.RefCount(pages[2]), 1) << "the index's reference only";
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();

  // Without asking, the partial page is not offered.
  auto plain = index.Lookup(tokens, int64_t(tokens.size()));
  EXPECT_EQ(plain.partial_page, -1);
  pool_.Release(plain.pages);

  // A request sharing 12 of its 20 tokens, then diverging.
  auto request = std::vector<int32_t>(tokens.begin(), tokens.begin() + 2 * kPage + 12);
  request.push_back(-1);
  request.push_back(-2);
  auto m = index.Lookup(request, int64_t(request.size()) - 1, /*partial=*/true);
  EXPECT_EQ(m.tokens, 2 * kPage);
  EXPECT_EQ(m.partial_page, pages[2]);
  EXPECT_EQ(m.partial_tokens, 12);
  EXPECT_EQ(pool_.RefCount(pages[2]), 2) << "the caller's reference";
  EXPECT_EQ(index.stats().partial_hit_tokens, 12);
  EXPECT_EQ(index.evictable_pages(), 0) << "the caller holds the chain and the partial page";
  pool_.Release(m.pages);
  pool_.Release({&m.partial_page, 1});

  // max_tokens caps it: the request's own 20 tokens, at most 2 * kPage + 5 of them.
  m = index.Lookup(tokens, 2 * kPage + 5, /*partial=*/true);
  EXPECT_EQ(m.partial_tokens, 5);
  pool_.Release(m.pages);
  pool_.Release({&m.partial_page, 1});

  // A newer partial page after the same chain replaces it.
  const auto longer = Concat(std::vector<int32_t>(tokens.begin(), tokens.begin() + 2 * kPage), Tokens(30, 7));
  const auto pages2 = Allocate(3);
  index.Insert(longer, pages2, /*with_partial=*/true);
  pool_.Release(pages2);
  EXPECT_EQ(index.partial_pages(), 1);
  m = index.Lookup(tokens, int64_t(tokens.size()) - 1, /*partial=*/true);
  EXPECT_EQ(m.partial_page, -1) << "the new partial page shares none of these tokens";
  pool_.Release(m.pages);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();

  // Evicted first: one page asked, the partial page goes, the chain stays.
  EXPECT_EQ(index.Evict(1), 1);
  EXPECT_EQ(index.partial_pages(), 0);
  EXPECT_EQ(index.cached_pages(), 2);
  // A partial page goes with its parent.
  const auto pages3 = Allocate(1);
  index.Insert(Tokens(10, 9), pages3, /*with_partial=*/true);  // after the root
  pool_.Release(pages3);
  const auto pages4 = Allocate(2);
  index.Insert(Tokens(kPage + 3, 5), pages4, /*with_partial=*/true);
  pool_.Release(pages4);
  EXPECT_EQ(index.partial_pages(), 2);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
  EXPECT_EQ(index.Evict(100), 5) << "two partial pages, then the three full ones";
  EXPECT_EQ(index.cached_pages(), 0);
  ExpectBaseline();
  // A partial page someone still holds goes from the index with its parent.
  const auto pages6 = Allocate(2);
  index.Insert(Tokens(kPage + 3, 6), pages6, /*with_partial=*/true);
  pool_.Release({&pages6[0], 1});  // the caller keeps the partial page
  EXPECT_EQ(index.Evict(100), 1) << "the parent only: the partial page is held";
  EXPECT_EQ(index.cached_pages(), 0);
  EXPECT_EQ(pool_.RefCount(pages6[1]), 1);
  pool_.Release({&pages6[1], 1});
  ExpectBaseline();
  const auto pages5 = Allocate(2);
  index.Insert(Tokens(kPage + 3, 5), pages5, /*with_partial=*/true);
  pool_.Release(pages5);
  index.Clear();
  ExpectBaseline();
}

TEST_F(PrefixIndexTest, PartialHitStopsAtTheFirstDivergentPage) {
  PrefixIndex index(pool_);
  const auto a = Tokens(3 * kPage, 1);
  const auto pages = Cache(index, a);
  auto b = a;
  b[size_t(kPage + 5)] = -1;  // diverges in the second page
  const auto m = index.Lookup(b, int64_t(b.size()) - 1);
  EXPECT_EQ(m.pages, std::vector<int32_t>{pages[0]});
  EXPECT_EQ(m.tokens, kPage);
  pool_.Release(m.pages);
}

TEST_F(PrefixIndexTest, MaxTokensCapsTheMatch) {
  PrefixIndex index(pool_);
  const auto tokens = Tokens(2 * kPage, 1);
  const auto pages = Cache(index, tokens);
  const auto capped = index.Lookup(tokens, 2 * kPage - 1);
  EXPECT_EQ(capped.pages, std::vector<int32_t>{pages[0]});
  const auto full = index.Lookup(tokens, 2 * kPage);
  EXPECT_EQ(full.pages, pages);
  EXPECT_TRUE(index.Lookup(tokens, kPage - 1).pages.empty());
  EXPECT_TRUE(index.Lookup(tokens, -5).pages.empty());
  // A shorter prompt only matches pages it fully covers.
  const std::vector<int32_t> short_prompt(tokens.begin(), tokens.begin() + kPage + 30);
  const auto short_match = index.Lookup(short_prompt, 1000);
  EXPECT_EQ(short_match.pages, std::vector<int32_t>{pages[0]});
  pool_.Release(capped.pages);
  pool_.Release(full.pages);
  pool_.Release(short_match.pages);
  EXPECT_EQ(pool_.RefCount(pages[0]), 1);
  EXPECT_EQ(pool_.RefCount(pages[1]), 1);
}

TEST_F(PrefixIndexTest, InsertSkipsAlreadyIndexedPrefixes) {
  PrefixIndex index(pool_);
  const auto a = Tokens(2 * kPage, 1);
  const auto first = Cache(index, a);
  // The same tokens computed again into other pages: nothing new is indexed,
  // and the index keeps the pages it already had.
  const auto second = Allocate(2);
  EXPECT_EQ(index.Insert(a, second), 0);
  EXPECT_EQ(pool_.RefCount(second[0]), 1);
  EXPECT_EQ(pool_.RefCount(second[1]), 1);
  // An extension indexes only its new page.
  const auto extended = Concat(a, Tokens(kPage, 2));
  const auto third = Allocate(1);
  EXPECT_EQ(index.Insert(extended, std::vector<int32_t>{second[0], second[1], third[0]}), 1);
  EXPECT_EQ(pool_.RefCount(third[0]), 2);
  EXPECT_EQ(pool_.RefCount(second[0]), 1);
  EXPECT_EQ(index.cached_pages(), 3);
  EXPECT_EQ(index.stats().inserted_pages, 3);
  const auto m = index.Lookup(extended, int64_t(extended.size()));
  EXPECT_EQ(m.pages, (std::vector<int32_t>{first[0], first[1], third[0]}));
  pool_.Release(m.pages);
  pool_.Release(second);
  pool_.Release(third);
  // Fewer pages than full token pages: only the pages given are considered.
  const auto other = Tokens(3 * kPage, 3);
  const auto one = Allocate(1);
  EXPECT_EQ(index.Insert(other, one), 1);
  pool_.Release(one);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
}

TEST_F(PrefixIndexTest, EvictsLeastRecentlyUsedFirst) {
  PrefixIndex index(pool_);
  const auto a = Tokens(kPage, 1), b = Tokens(kPage, 2), c = Tokens(kPage, 3);
  const int32_t page_a = Cache(index, a)[0];
  const int32_t page_b = Cache(index, b)[0];
  const int32_t page_c = Cache(index, c)[0];
  pool_.Release(index.Lookup(a, kPage).pages);  // a becomes most recent
  const int64_t free_before = pool_.free_pages();
  EXPECT_EQ(index.Evict(1), 1);
  EXPECT_EQ(pool_.RefCount(page_b), 0);
  EXPECT_EQ(pool_.free_pages(), free_before + 1);
  EXPECT_EQ(index.Evict(1), 1);
  EXPECT_EQ(pool_.RefCount(page_c), 0);
  EXPECT_EQ(pool_.RefCount(page_a), 1);
  EXPECT_EQ(index.Lookup(b, kPage).pages.size(), 0u);
  EXPECT_EQ(index.Evict(5), 1);
  EXPECT_EQ(index.cached_pages(), 0);
  EXPECT_EQ(index.stats().evicted_pages, 3);
  ExpectBaseline();
}

TEST_F(PrefixIndexTest, EvictsOnlyLeavesSoChainsStayReachable) {
  PrefixIndex index(pool_);
  const auto chain = Tokens(3 * kPage, 1);  // pages A -> B -> C
  const auto pages = Cache(index, chain);
  // Insert touched A, B, C in that order; a plain LRU would now evict A and
  // strand B and C, unreachable from any root.
  EXPECT_EQ(index.Evict(1), 1);
  EXPECT_EQ(pool_.RefCount(pages[2]), 0);  // C went, not A
  EXPECT_EQ(pool_.RefCount(pages[0]), 1);
  const auto m = index.Lookup(chain, int64_t(chain.size()));
  EXPECT_EQ(m.pages, (std::vector<int32_t>{pages[0], pages[1]}));
  pool_.Release(m.pages);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
}

TEST_F(PrefixIndexTest, EvictNeverFreesPagesWithOutsideReferences) {
  PrefixIndex index(pool_);
  const auto chain = Tokens(3 * kPage, 1);  // A -> B -> C
  const auto pages = Allocate(3);
  index.Insert(chain, pages);
  // The caller keeps C only: A and B are index-only but not leaves.
  pool_.Release(std::vector<int32_t>{pages[0], pages[1]});
  EXPECT_EQ(index.evictable_pages(), 0);
  EXPECT_EQ(index.Evict(10), 0);
  // A sibling branch A -> B -> D is index-only: only D may go.
  const auto branch =
      Concat(std::vector<int32_t>(chain.begin(), chain.begin() + 2 * kPage), Tokens(kPage, 2));
  const auto d = Allocate(1);
  EXPECT_EQ(index.Insert(branch, std::vector<int32_t>{pages[0], pages[1], d[0]}), 1);
  pool_.Release(d);
  EXPECT_EQ(index.evictable_pages(), 1);
  EXPECT_EQ(index.Evict(10), 1);
  EXPECT_EQ(pool_.RefCount(d[0]), 0);
  EXPECT_EQ(pool_.RefCount(pages[2]), 2);
  // Once the caller lets C go, the whole chain is evictable, leaf first.
  pool_.Release(std::vector<int32_t>{pages[2]});
  EXPECT_EQ(index.evictable_pages(), 3);
  EXPECT_EQ(index.Evict(1), 1);
  EXPECT_EQ(pool_.RefCount(pages[2]), 0);
  EXPECT_EQ(index.Evict(10), 2);
  ExpectBaseline();
}

// Depth-only keys: every page at the same depth collides.
uint64_t DepthKey(uint64_t parent_key, std::span<const int32_t>) { return parent_key + 1; }
// Keys that ignore the parent: equal pages after different prefixes collide.
uint64_t TokensOnlyKey(uint64_t, std::span<const int32_t> page_tokens) {
  return PrefixIndex::DefaultChainKey(0, page_tokens);
}

TEST_F(PrefixIndexTest, CollidingKeysNeverReturnOtherTokensPages) {
  PrefixIndex index(pool_, &DepthKey);
  const auto a = Tokens(2 * kPage, 1), b = Tokens(2 * kPage, 2);
  const auto pages_a = Cache(index, a);
  const auto pages_b = Allocate(2);
  EXPECT_EQ(index.Insert(b, pages_b), 0);  // b's keys are taken by a
  EXPECT_EQ(pool_.RefCount(pages_b[0]), 1);
  pool_.Release(pages_b);
  EXPECT_TRUE(index.Lookup(b, 1000).pages.empty());  // same keys, other tokens
  // Same first page, different second page: matches one page only.
  const auto mixed = Concat(std::vector<int32_t>(a.begin(), a.begin() + kPage), Tokens(kPage, 3));
  const auto m = index.Lookup(mixed, 1000);
  EXPECT_EQ(m.pages, std::vector<int32_t>{pages_a[0]});
  pool_.Release(m.pages);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
}

TEST_F(PrefixIndexTest, CollidingKeysCheckTheParentToo) {
  PrefixIndex index(pool_, &TokensOnlyKey);
  const auto x = Tokens(kPage, 1), y = Tokens(kPage, 2), c = Tokens(kPage, 3);
  const auto pages_xc = Cache(index, Concat(x, c));
  Cache(index, y);
  // [y, c]: page c is indexed under the same key, but after x, not y. Its
  // cache rows were computed with x as context, so it must not match.
  const auto m = index.Lookup(Concat(y, c), 1000);
  EXPECT_EQ(m.pages.size(), 1u);
  EXPECT_NE(m.pages[0], pages_xc[1]);
  pool_.Release(m.pages);
}

TEST_F(PrefixIndexTest, ClearAndDestructorReturnEveryPage) {
  {
    PrefixIndex index(pool_);
    const auto a = Tokens(3 * kPage, 1);
    Cache(index, a);
    Cache(index, Tokens(2 * kPage, 2));
    const auto held = index.Lookup(a, 1000);
    index.Clear();
    EXPECT_EQ(index.cached_pages(), 0);
    for (int32_t p : held.pages) EXPECT_EQ(pool_.RefCount(p), 1);  // the caller's stay
    pool_.Release(held.pages);
    ExpectBaseline();
    Cache(index, a);
    EXPECT_EQ(pool_.used_pages(), 3);
  }
  ExpectBaseline();
}

// The events KV-event publishers send: one chain per Insert (only the new
// pages, keyed as every engine keys them), the keys each Evict frees, Clear.
TEST_F(PrefixIndexTest, EventsNameEveryPageStoredAndRemovedWithTheSharedChainKeys) {
  PrefixIndex index(pool_);
  std::vector<PrefixIndex::Event> events;
  index.SetEventHook([&](PrefixIndex::Event e) { events.push_back(std::move(e)); });
  const auto a = Tokens(2 * kPage, 1);
  Cache(index, a);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, PrefixIndex::Event::Kind::kStored);
  EXPECT_EQ(events[0].keys, ChainKeys(a, kPage));
  EXPECT_EQ(events[0].parent_key, kChainRootSeed);
  EXPECT_EQ(events[0].tokens, a);
  auto longer = a;
  const auto more = Tokens(kPage, 500);
  longer.insert(longer.end(), more.begin(), more.end());
  Cache(index, longer);  // its first two pages are indexed already: one new page
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].keys, std::vector<uint64_t>{ChainKeys(longer, kPage)[2]});
  EXPECT_EQ(events[1].parent_key, ChainKeys(a, kPage)[1]);
  EXPECT_EQ(events[1].tokens, more);
  Cache(index, a);  // nothing new: no event
  EXPECT_EQ(events.size(), 2u);
  EXPECT_EQ(index.Evict(1), 1);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].kind, PrefixIndex::Event::Kind::kRemoved);
  EXPECT_EQ(events[2].keys, std::vector<uint64_t>{ChainKeys(longer, kPage)[2]});
  index.Clear();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[3].kind, PrefixIndex::Event::Kind::kCleared);
  ExpectBaseline();
}

// Invariant 10: a cache never answers a question about another tenant. The
// same tokens under another tenant's root (common/chain_key.h, CacheRoot) find
// nothing: no whole page, no partial page after a chain, no partial page of a
// short prompt; the same root finds them all; the KV event of a salted
// chain names its root as the first page's parent.
TEST_F(PrefixIndexTest, PagesOfOneTenantAreNeverFoundUnderAnother) {
  PrefixIndex index(pool_);
  std::vector<PrefixIndex::Event> events;
  index.SetEventHook([&](PrefixIndex::Event e) { events.push_back(std::move(e)); });
  const uint64_t a = CacheRoot(11), b = CacheRoot(22);
  ASSERT_NE(a, b);
  ASSERT_NE(a, kChainRootSeed);
  EXPECT_EQ(CacheRoot(0), kChainRootSeed) << "salt 0 is the shared namespace";
  const auto tokens = Tokens(2 * kPage + 20, 1);
  const auto pages = Allocate(3);
  EXPECT_EQ(index.Insert(tokens, pages, /*with_partial=*/true, a), 2);
  pool_.Release(pages);
  const auto short_prompt = Tokens(30, 2);
  const auto short_page = Allocate(1);
  index.Insert(short_prompt, short_page, /*with_partial=*/true, a);
  pool_.Release(short_page);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].parent_key, a);
  EXPECT_TRUE(events[0].from_root) << "KV events publish it as a first block, without a parent";
  EXPECT_EQ(events[0].keys, ChainKeys(tokens, kPage, a));

  for (const uint64_t other : {b, kChainRootSeed}) {
    auto m = index.Lookup(tokens, int64_t(tokens.size()) - 1, /*partial=*/true, other);
    EXPECT_TRUE(m.pages.empty());
    EXPECT_EQ(m.partial_page, -1);
    auto s = index.Lookup(short_prompt, int64_t(short_prompt.size()) - 1, /*partial=*/true, other);
    EXPECT_EQ(s.partial_page, -1) << "a short prompt's partial page belongs to its tenant too";
  }
  auto m = index.Lookup(tokens, int64_t(tokens.size()) - 1, /*partial=*/true, a);
  EXPECT_EQ(m.tokens, 2 * kPage);
  EXPECT_EQ(m.partial_tokens, 19);
  pool_.Release(m.pages);
  pool_.Release({&m.partial_page, 1});
  auto s = index.Lookup(short_prompt, int64_t(short_prompt.size()) - 1, /*partial=*/true, a);
  EXPECT_EQ(s.partial_tokens, 29);
  pool_.Release({&s.partial_page, 1});

  // The other tenant's own copy lives beside it, each found under its root.
  const auto pages_b = Allocate(3);
  EXPECT_EQ(index.Insert(tokens, pages_b, /*with_partial=*/true, b), 2);
  pool_.Release(pages_b);
  auto mb = index.Lookup(tokens, int64_t(tokens.size()) - 1, /*partial=*/true, b);
  EXPECT_EQ(mb.pages, std::vector<int32_t>(pages_b.begin(), pages_b.begin() + 2));
  EXPECT_EQ(mb.partial_page, pages_b[2]);
  pool_.Release(mb.pages);
  pool_.Release({&mb.partial_page, 1});
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
  EXPECT_EQ(index.Evict(100), 7);
  EXPECT_TRUE(index.CheckInvariants().ok()) << index.CheckInvariants().ToString();
  ExpectBaseline();
}

}  // namespace
}  // namespace tandem
