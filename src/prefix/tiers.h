// The hierarchical prefix cache under an engine's page pool (L1):
//   L2  a larger host pool of its own (same registry-derived layout),
//   L3  one file per page in a directory that survives restarts, held by
//       this process alone (prefix/disk_folder.h),
// and a copy engine: one thread that moves pages between tiers.
//
// Pages are named by the prefix index's chain keys (prefix_index.h): page i of
// a prompt is key_i = XXH3(tokens of page i, seed key_{i-1}); every tier entry
// also keeps its 64 tokens and its parent's key, and a match needs both, so a
// key collision never hands out another prefix's page. A page always moves
// with every registered buffer of every layer, as one unit, or not at all.
//
// Loads into L1 are layer-wise: a LayerGates has one gate per layer, opened
// only after every registered buffer of that layer has landed in every page
// of the load. The forward pass reads cached rows through one accessor that
// waits on the gate (model/forward.h), so a request starts computing while
// its prefix is still arriving. L3 pages are first prefetched into L2 (with a
// deadline; what misses it is recomputed), so a load into L1 never waits on a
// disk and never fails.
//
// Write policies (L1 -> L2): write-through (as pages enter the L1 prefix
// index), write-through-selective (once an L1 page has been hit N times),
// write-back (when L1 evicts it). Every page that reaches L2 is also written
// to L3 when a disk directory is configured. Each tier evicts LRU.
//
// Thread safety: TieredCache belongs to the engine's loop thread; the copy
// engine thread and the loop share L2 and L3 under their own mutexes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/layer_gates.h"
#include "common/env.h"
#include "common/mutex.h"
#include "cache/page_pool.h"
#include "common/status.h"

namespace tandem {

using PageTokens = std::array<int32_t, kPageTokens>;

class TieredCache;

enum class WritePolicy { kWriteThrough, kWriteThroughSelective, kWriteBack };
StatusOr<WritePolicy> ParseWritePolicy(const std::string& name);  // write-through | write-through-selective | write-back

struct TierOptions {
  int64_t host_pages = 0;   // L2 size in pages (or from host_bytes); 0 = no tiers
  int64_t host_bytes = 0;   // L2 size in bytes, when host_pages is 0
  std::string disk_dir;     // L3 directory; empty = no L3
  int64_t disk_bytes = 0;   // L3 size limit
  WritePolicy policy = WritePolicy::kWriteThrough;
  int selective_hits = 2;   // write-through-selective: L1 hits before a page goes to L2
  std::chrono::milliseconds prefetch_deadline{2000};  // L3 -> L2 before the request gives up on it
  // Builds the tiers once Create has checked the options and claimed the
  // disk directory; null: TieredCache itself. The fault library's copy
  // engine comes this way (faults/faulty_tiers.h); production never sets it.
  using Factory = std::function<StatusOr<std::unique_ptr<TieredCache>>(
      PagePool& l1, const CacheBufferRegistry& registry, const TierOptions& options, std::string disk_subdir)>;
  Factory make;
};

struct TierStats {
  int64_t l2_pages_total = 0, l2_pages_used = 0, l2_pinned = 0;
  int64_t l3_pages = 0, l3_bytes = 0;
  int64_t hit_tokens_l1 = 0, hit_tokens_l2 = 0, hit_tokens_l3 = 0;
  int64_t load_bytes_l2 = 0, load_bytes_l3 = 0, store_bytes_l2 = 0, store_bytes_l3 = 0;
  int64_t evicted_l2 = 0, evicted_l3 = 0;
  int64_t loads = 0, prefetches = 0, prefetch_misses = 0, disk_errors = 0;
  double load_seconds = 0, gate_wait_seconds = 0;
};

class DiskFolder;

class TieredCache {
 public:
  // `l1` is the engine's pool; `model_identity` is a keyed fingerprint
  // (common/keyed_fingerprint.h) of everything that decides a page's bytes
  // but the layout (the weights identity, the attention). L3 keeps one folder
  // per identity and layout and refuses one that holds another's pages,
  // naming the parts that differ.
  static StatusOr<std::unique_ptr<TieredCache>> Create(PagePool& l1, const CacheBufferRegistry& registry,
                                                       const TierOptions& options,
                                                       const std::string& model_identity);
  virtual ~TieredCache();  // finishes queued work, stops the copy engine

  // The pages of `tokens` after the first `from_page` full pages that L2, then
  // L3, hold as one contiguous chain, limited to max_tokens tokens.
  struct Match {
    std::vector<int32_t> l2_pages;  // pinned; hand them to LoadIntoL1 (or Unpin)
    int64_t l3_pages = 0;           // following the L2 chain
  };
  // `root`: the tenant's chain root (common/chain_key.h): the tiers hold
  // pages under their chain keys, so only the same tenant's are found.
  Match Lookup(std::span<const int32_t> tokens, int64_t from_page, int64_t max_tokens, uint64_t root);
  void Unpin(std::span<const int32_t> l2_pages);
  // Prompt tokens a request got from each tier (for stats and metrics).
  void RecordHits(int64_t l1_tokens, int64_t l2_tokens, int64_t l3_tokens);

  // Copies pinned L2 pages into L1 pages, layer by layer, on the copy engine;
  // unpins them when done. The returned gates open layer by layer.
  std::shared_ptr<LayerGates> LoadIntoL1(std::vector<int32_t> l2_pages, std::vector<int32_t> l1_pages);
  // Loads m's pinned L2 chain into new L1 pages, appended to *l1_pages, and
  // returns their gates. make_room(n) may free L1 pages first (false: it has
  // nothing more to free). Without room it unpins the chain and returns null.
  std::shared_ptr<LayerGates> LoadMatch(Match& m, const std::function<bool(int64_t n)>& make_room,
                                        std::vector<int32_t>* l1_pages);

  // Starts reading the L3 chain that follows `from_page` into L2. Done() says
  // when it finished or its deadline passed.
  struct Prefetch {
    std::atomic<bool> done{false};
    std::chrono::steady_clock::time_point deadline;
    bool Ready() const { return done.load() || Env::Default().Now() >= deadline; }
  };
  std::shared_ptr<Prefetch> PrefetchFromL3(std::span<const int32_t> tokens, int64_t from_page, int64_t max_tokens,
                                           uint64_t root);

  // The L1 prefix index cached these full pages (tokens[64 i, 64 i + 64) in
  // pages[i]); the write policy decides which go to L2. Holds an L1 reference
  // on each page it copies until the copy is done (see Poll).
  void OnL1Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages, uint64_t root);
  // An L1 lookup hit these pages (selective write-through counts hits).
  void OnL1Hit(std::span<const int32_t> tokens, std::span<const int32_t> pages, uint64_t root);
  // L1 is evicting this page (write-back copies it now, on the caller's thread).
  void OnL1Evict(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, int32_t page);

  // Loop thread: releases L1 references of finished copies. Call every step.
  void Poll();
  // L1 pages still referenced by copies to L2 (not yet released by Poll).
  int64_t l1_pages_held() const { return l1_refs_held_; }
  // Blocks until the copy engine is idle (tests, shutdown).
  void Drain();

  TierStats stats() const;
  Status CheckAccounting() const;  // every tier's pool/file accounting is consistent
  const TierOptions& options() const { return options_; }

 protected:
  TieredCache(PagePool& l1, const CacheBufferRegistry& registry, const TierOptions& options, std::string disk_subdir);
  // Copy engine: copies one load from L2 pages `src` into L1 pages `dst`,
  // opening gates[l] once every registered buffer of layer l has landed in
  // every page (invariant 3); returns the bytes copied.
  virtual int64_t CopyLoad(std::span<const int32_t> src, std::span<const int32_t> dst, LayerGates& gates);
  // Copy engine: before each L3 page is read.
  virtual void BeforeDiskRead() {}
  PagePool& l1() { return l1_; }
  PagePool& host() { return *host_; }

 private:
  struct HostEntry {
    uint64_t key = 0, parent = 0;
    int32_t page = -1;
    PageTokens tokens{};
    bool ready = false;  // data landed (loads may read it)
    std::list<uint64_t>::iterator lru;
  };
  struct DiskEntry {
    uint64_t parent = 0;
    PageTokens tokens{};
    int64_t bytes = 0;
    std::list<uint64_t>::iterator lru;
  };

  void Submit(std::function<void()> job);
  void RunCopyEngine();
  // L2, under host_mu_: a new (not ready) entry with a page, evicting LRU
  // unpinned ready entries; nullptr when full of pinned pages.
  HostEntry* ReserveHostLocked(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) REQUIRES(host_mu_);
  void DropHostLocked(HostEntry& e) REQUIRES(host_mu_);
  // Copies an L1 page into a reserved L2 entry and publishes it (any thread).
  void CopyL1ToHost(int32_t l1_page, uint64_t key);
  // Loop thread: queues a copy of an L1 page into L2 (and L3), holding an L1
  // reference until it is done; a no-op when L2 has the page or is full of pinned ones.
  void StoreFromL1(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, int32_t page);
  // L3 (copy engine thread, or Create).
  std::string PagePath(uint64_t key) const;
  Status WriteDisk(uint64_t key);  // L2 entry -> file
  Status ReadDisk(uint64_t key);   // file -> new L2 entry
  Status ScanDisk();
  void EvictDiskLocked() REQUIRES(disk_mu_);

  PagePool& l1_;
  const TierOptions options_;
  const std::string disk_subdir_;
  std::unique_ptr<DiskFolder> disk_folder_;  // L3's folder, locked while the tier lives (set by Create)

  mutable Mutex host_mu_;
  // L2 pages: allocation under host_mu_; their bytes are read and written by
  // the copy engine outside it (an entry is published once its data landed).
  const std::unique_ptr<PagePool> host_;
  std::unordered_map<uint64_t, HostEntry> host_index_ GUARDED_BY(host_mu_);
  std::list<uint64_t> host_lru_ GUARDED_BY(host_mu_);  // front = oldest
  // Host pages a load holds (ref count above the index's one), kept as they
  // change so stats() is O(1) once per engine step.
  int64_t l2_pinned_ GUARDED_BY(host_mu_) = 0;

  mutable Mutex disk_mu_;
  std::unordered_map<uint64_t, DiskEntry> disk_index_ GUARDED_BY(disk_mu_);
  std::list<uint64_t> disk_lru_ GUARDED_BY(disk_mu_);
  int64_t disk_bytes_ GUARDED_BY(disk_mu_) = 0;

  // Loop thread only.
  std::unordered_map<uint64_t, int> l1_hits_;  // selective write-through
  int64_t l1_refs_held_ = 0;
  std::vector<std::shared_ptr<LayerGates>> pending_loads_;

  mutable Mutex stats_mu_;
  TierStats stats_ GUARDED_BY(stats_mu_);

  mutable Mutex job_mu_;
  std::condition_variable job_cv_, idle_cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(job_mu_);
  bool busy_ GUARDED_BY(job_mu_) = false;
  bool stop_ GUARDED_BY(job_mu_) = false;
  std::vector<int32_t> l1_to_release_ GUARDED_BY(job_mu_);  // copies done, L1 refs to drop
  std::thread copy_engine_;
};

// Chain keys of the full pages of `tokens` from `root` (as the prefix index computes them).
std::vector<uint64_t> PageChainKeys(std::span<const int32_t> tokens, int64_t n_pages, uint64_t root);

}  // namespace tandem
