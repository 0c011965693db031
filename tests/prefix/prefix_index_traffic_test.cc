// Randomized engine-like traffic through a PrefixIndex: multi-turn
// conversations that resend their history, branches off shared prefixes,
// requests that finish out of order, and evictions under memory pressure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "prefix/prefix_index.h"

namespace tandem {
namespace {

constexpr int64_t kPage = kPageTokens;

// A fingerprint of tokens[0, end), independent of the index's hash: what a
// page's cache rows depend on. "Computing" a page writes the fingerprint of
// its prefix into the page's memory, so a matched page can be checked.
uint64_t PrefixFingerprint(const std::vector<int32_t>& tokens, int64_t end) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int64_t i = 0; i < end; ++i) h = (h ^ uint32_t(tokens[size_t(i)])) * 1099511628211ull;
  return h;
}

CacheBufferRegistry OneBufferRegistry() {
  CacheBufferRegistry r;
  EXPECT_TRUE(r.Register({"k", CacheDType::kF32, 8}).ok());
  return r;
}

// Plays the engine's part. `outside_` counts the references running requests
// hold, so the index's own share of every page is known exactly.
class Traffic {
 public:
  static constexpr size_t kMaxRunning = 6;
  static constexpr size_t kConversations = 12;  // bounded, so turns come back

  explicit Traffic(int64_t n_pages)
      : registry_(OneBufferRegistry()),
        pool_(registry_, 2, n_pages),
        index_(pool_),
        outside_(size_t(n_pages), 0) {}

  int64_t Uniform(int64_t lo, int64_t hi) { return lo + int64_t(rng_() % uint64_t(hi - lo + 1)); }

  // A new prompt: a new conversation, a branch off an earlier one, or the
  // next turn of one (its whole history plus new tokens).
  std::vector<int32_t> NextPrompt() {
    if (conversations_.empty() || Uniform(0, 3) == 0) {
      conversations_.emplace_back();
    } else {
      const size_t pick = size_t(Uniform(0, int64_t(conversations_.size()) - 1));
      if (Uniform(0, 1) == 0) {
        const auto& base = conversations_[pick];
        conversations_.emplace_back(base.begin(), base.begin() + Uniform(0, int64_t(base.size())));
      } else {
        std::swap(conversations_[pick], conversations_.back());
      }
    }
    if (conversations_.size() > kConversations) {
      conversations_.erase(conversations_.begin() + Uniform(0, kConversations - 1));
    }
    auto& conversation = conversations_.back();  // the one this request continues
    if (conversation.size() > 1200) conversation.resize(size_t(Uniform(0, 300)));
    for (int64_t n = Uniform(1, 200); n > 0; --n) conversation.push_back(int32_t(Uniform(0, 999)));
    return conversation;
  }

  // Lookup, verify the matched pages, evict if short, compute the rest, index.
  void StartRequest() {
    const std::vector<int32_t> prompt = NextPrompt();
    PrefixIndex::Match match = index_.Lookup(prompt, int64_t(prompt.size()) - 1);
    ASSERT_EQ(match.tokens, int64_t(match.pages.size()) * kPage);
    ASSERT_LT(match.tokens, int64_t(prompt.size()));
    for (size_t i = 0; i < match.pages.size(); ++i) {
      ASSERT_EQ(FingerprintAt(match.pages[i]), PrefixFingerprint(prompt, int64_t(i + 1) * kPage))
          << "page " << match.pages[i] << " holds another prefix";
    }
    hit_tokens_ += match.tokens;
    cache_hits_ += !match.pages.empty();

    const int64_t need = (int64_t(prompt.size()) + kPage - 1) / kPage - int64_t(match.pages.size());
    if (need > pool_.free_pages()) index_.Evict(need - pool_.free_pages());
    auto fresh = pool_.Allocate(need);
    if (!fresh.ok()) {  // everything left is pinned by running requests
      ++failed_allocations_;
      pool_.Release(match.pages);
      return;
    }
    std::vector<int32_t> table = std::move(match.pages);
    for (int32_t page : *fresh) {
      const int64_t end = std::min<int64_t>((int64_t(table.size()) + 1) * kPage, prompt.size());
      const uint64_t fingerprint = PrefixFingerprint(prompt, end);
      std::memcpy(pool_.Segment(0, 1, page), &fingerprint, sizeof(fingerprint));
      table.push_back(page);
    }
    index_.Insert(prompt, table);
    for (int32_t page : table) ++outside_[size_t(page)];
    running_.push_back(std::move(table));
  }

  void FinishRequest() {
    std::swap(running_[size_t(Uniform(0, int64_t(running_.size()) - 1))], running_.back());
    pool_.Release(running_.back());
    for (int32_t page : running_.back()) --outside_[size_t(page)];
    running_.pop_back();
  }

  void EvictSome() {
    const int64_t evictable = index_.evictable_pages();
    const int64_t want = Uniform(0, 8);
    ASSERT_EQ(index_.Evict(want), std::min(want, evictable));
    ASSERT_EQ(index_.evictable_pages(), evictable - std::min(want, evictable));
  }

  // Invariants, accounting, and refcount(page) - outside references in {0, 1}
  // with exactly cached_pages() ones.
  void CheckState() {
    ASSERT_TRUE(index_.CheckInvariants().ok()) << index_.CheckInvariants().ToString();
    ASSERT_TRUE(pool_.CheckAccounting().ok()) << pool_.CheckAccounting().ToString();
    int64_t held_by_index = 0;
    for (int32_t page = 0; page < pool_.total_pages(); ++page) {
      const int32_t own = pool_.RefCount(page) - outside_[size_t(page)];
      ASSERT_TRUE(own == 0 || own == 1) << "page " << page << " index refs " << own;
      held_by_index += own;
    }
    ASSERT_EQ(held_by_index, index_.cached_pages());
    ASSERT_EQ(index_.stats().inserted_pages - index_.stats().evicted_pages, index_.cached_pages());
  }

  void Step() {
    const int64_t action = Uniform(0, 9);
    if (action <= 5 && running_.size() < kMaxRunning) {
      StartRequest();
    } else if (action <= 8 && !running_.empty()) {
      FinishRequest();
    } else {
      EvictSome();
    }
  }

  void FinishAll() {
    while (!running_.empty()) FinishRequest();
  }

  CacheBufferRegistry registry_;
  PagePool pool_;
  PrefixIndex index_;
  std::vector<int32_t> outside_;
  std::vector<std::vector<int32_t>> conversations_, running_;
  std::mt19937 rng_{2024};
  int64_t hit_tokens_ = 0, cache_hits_ = 0, failed_allocations_ = 0;

 private:
  uint64_t FingerprintAt(int32_t page) {
    uint64_t v;
    std::memcpy(&v, pool_.Segment(0, 1, page), sizeof(v));
    return v;
  }
};

TEST(PrefixIndexTrafficTest, SharedPrefixTrafficKeepsRefcountsExact) {
  Traffic traffic(32);  // small enough that running requests sometimes pin it all
  for (int step = 0; step < 3000; ++step) {
    ASSERT_NO_FATAL_FAILURE(traffic.Step()) << "step " << step;
    ASSERT_NO_FATAL_FAILURE(traffic.CheckState()) << "step " << step;
  }
  const PrefixIndex::Stats& stats = traffic.index_.stats();
  EXPECT_EQ(stats.hit_tokens, traffic.hit_tokens_);
  // The workload must actually exercise sharing and memory pressure.
  EXPECT_GT(traffic.cache_hits_, 300);
  EXPECT_GT(stats.evicted_pages, 100);
  EXPECT_GT(traffic.failed_allocations_, 0);

  traffic.FinishAll();
  EXPECT_EQ(traffic.index_.evictable_pages(), traffic.index_.cached_pages());
  traffic.index_.Clear();
  EXPECT_EQ(traffic.pool_.free_pages(), traffic.pool_.total_pages());
  EXPECT_TRUE(traffic.pool_.CheckAccounting().ok());
}

// The destructor alone hands every page back, with requests finished first
// (the engine's order: it drains before tearing the index down).
TEST(PrefixIndexTrafficTest, DestructorReturnsPagesAfterTraffic) {
  CacheBufferRegistry registry = OneBufferRegistry();
  PagePool pool(registry, 2, 40);
  {
    PrefixIndex index(pool);
    std::mt19937 rng(5);
    for (int i = 0; i < 50; ++i) {
      std::vector<int32_t> tokens(size_t(64 + rng() % 300));
      for (auto& t : tokens) t = int32_t(rng() % 4);  // tiny vocabulary: heavy sharing
      auto match = index.Lookup(tokens, int64_t(tokens.size()) - 1);
      const int64_t need =
          (int64_t(tokens.size()) + kPage - 1) / kPage - int64_t(match.pages.size());
      index.Evict(need);
      auto fresh = pool.Allocate(need);
      ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
      match.pages.insert(match.pages.end(), fresh->begin(), fresh->end());
      index.Insert(tokens, match.pages);
      pool.Release(match.pages);
    }
    EXPECT_GT(index.cached_pages(), 0);
  }
  EXPECT_EQ(pool.free_pages(), pool.total_pages());
  EXPECT_TRUE(pool.CheckAccounting().ok());
}

}  // namespace
}  // namespace tandem
