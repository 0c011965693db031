#include "prefix/tiers.h"

#include "common/env.h"
#include "prefix/tiers_internal.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "cache/page_copy.h"
#include "common/keyed_fingerprint.h"
#include "common/log.h"
#include "prefix/disk_folder.h"
#include "prefix/prefix_index.h"

namespace tandem {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

StatusOr<WritePolicy> ParseWritePolicy(const std::string& name) {
  if (name == "write-through") return WritePolicy::kWriteThrough;
  if (name == "write-through-selective") return WritePolicy::kWriteThroughSelective;
  if (name == "write-back") return WritePolicy::kWriteBack;
  return InvalidArgument("--cache-write-policy must be write-through, write-through-selective or write-back, not '" +
                         name + "'");
}

std::vector<uint64_t> PageChainKeys(std::span<const int32_t> tokens, int64_t n_pages, uint64_t root) {
  std::vector<uint64_t> keys;
  uint64_t key = root;
  for (int64_t i = 0; i < n_pages && (i + 1) * kPageTokens <= int64_t(tokens.size()); ++i) {
    key = PrefixIndex::DefaultChainKey(key, tokens.subspan(size_t(i * kPageTokens), kPageTokens));
    keys.push_back(key);
  }
  return keys;
}

using namespace tiers_detail;

// ---------------------------------------------------------------- tiered cache

StatusOr<std::unique_ptr<TieredCache>> TieredCache::Create(PagePool& l1, const CacheBufferRegistry& registry,
                                                           const TierOptions& options,
                                                           const std::string& model_identity) {
  TierOptions sized = options;
  if (sized.host_pages == 0 && sized.host_bytes > 0) sized.host_pages = sized.host_bytes / l1.layout().BytesPerPage();
  if (sized.host_pages < 1) {
    return InvalidArgument("--host-cache-size must hold at least one page (" +
                           std::to_string(l1.layout().BytesPerPage()) + " bytes)");
  }
  if (options.selective_hits < 1) return InvalidArgument("write-through-selective needs at least 1 hit");
  std::string subdir;
  std::unique_ptr<DiskFolder> folder;
  if (!options.disk_dir.empty()) {
    const int64_t file_bytes = int64_t(sizeof(DiskHeader)) + l1.layout().BytesPerPage();
    if (options.disk_bytes < file_bytes) {
      return InvalidArgument("--disk-cache-size must hold at least one page (" + std::to_string(file_bytes) +
                             " bytes)");
    }
    std::string identity = model_identity;
    AppendFingerprintPart(&identity, "cache layout", l1.layout().Fingerprint());
    char name[32];
    std::snprintf(name, sizeof(name), "%016llx", (unsigned long long)XXH3_64bits(identity.data(), identity.size()));
    // Held from before the identity is claimed until the tier is gone.
    TANDEM_ASSIGN_OR_RETURN(folder, DiskFolder::Own(options.disk_dir, name));
    subdir = folder->path();
    TANDEM_RETURN_IF_ERROR(ClaimDiskDirectory(subdir, identity));
    TLOG_INFO("disk cache %s: %lld bytes, held by pid %d\n", subdir.c_str(), (long long)options.disk_bytes,
              int(::getpid()));
  }
  std::unique_ptr<TieredCache> t;
  if (options.make) {
    TANDEM_ASSIGN_OR_RETURN(t, options.make(l1, registry, sized, subdir));
  } else {
    t.reset(new TieredCache(l1, registry, sized, subdir));
  }
  t->disk_folder_ = std::move(folder);
  if (!subdir.empty()) TANDEM_RETURN_IF_ERROR(t->ScanDisk());
  return t;
}

TieredCache::TieredCache(PagePool& l1, const CacheBufferRegistry& registry, const TierOptions& options,
                         std::string disk_subdir)
    : l1_(l1),
      options_(options),
      disk_subdir_(std::move(disk_subdir)),
      host_(std::make_unique<PagePool>(registry, l1.layout().n_layers(), options.host_pages)) {
  host_->SetPageHook(l1.page_hook());  // L2's freed pages are treated like L1's
  copy_engine_ = std::thread([this] { RunCopyEngine(); });
}

TieredCache::~TieredCache() {
  Drain();
  {
    MutexLock lock(job_mu_);
    stop_ = true;
  }
  job_cv_.notify_all();
  copy_engine_.join();
}

void TieredCache::Submit(std::function<void()> job) {
  {
    MutexLock lock(job_mu_);
    jobs_.push_back(std::move(job));
  }
  job_cv_.notify_all();
}

void TieredCache::RunCopyEngine() {
  for (;;) {
    std::function<void()> job;
    {
      UniqueLock lock(job_mu_);
      job_cv_.wait(lock.native(), [&]() REQUIRES(job_mu_) { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
    }
    job();
    {
      MutexLock lock(job_mu_);
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

void TieredCache::Drain() {
  UniqueLock lock(job_mu_);
  idle_cv_.wait(lock.native(), [&]() REQUIRES(job_mu_) { return jobs_.empty() && !busy_; });
}

int64_t TieredCache::CopyLoad(std::span<const int32_t> src, std::span<const int32_t> dst, LayerGates& gates) {
  const CacheLayout& layout = l1_.layout();
  int64_t bytes = 0;
  for (int l = 0; l < layout.n_layers(); ++l) {
    // Every registered buffer of this layer, for every page, before its gate opens.
    for (size_t p = 0; p < src.size(); ++p) {
      for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
        std::memcpy(l1_.Segment(b, l, dst[p]), host_->Segment(b, l, src[p]), size_t(layout.page_stride(b)));
        bytes += layout.page_stride(b);
      }
    }
    gates.Open(l);
  }
  return bytes;
}

void TieredCache::Poll() {
  std::vector<int32_t> release;
  {
    MutexLock lock(job_mu_);
    release.swap(l1_to_release_);
  }
  if (!release.empty()) l1_.Release(release);
  l1_refs_held_ -= int64_t(release.size());
  std::erase_if(pending_loads_, [&](const std::shared_ptr<LayerGates>& g) {
    if (!g->AllOpen()) return false;
    MutexLock lock(stats_mu_);
    stats_.gate_wait_seconds += double(g->waited_ns()) * 1e-9;
    return true;
  });
}

// ---------------------------------------------------------------- L2

TieredCache::HostEntry* TieredCache::ReserveHostLocked(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) {
  if (host_index_.count(key)) return nullptr;
  while (host_->free_pages() == 0) {
    // The oldest ready entry no load has pinned.
    auto victim = std::find_if(host_lru_.begin(), host_lru_.end(), [&](uint64_t k) REQUIRES(host_mu_) {
      const HostEntry& e = host_index_.at(k);
      return e.ready && host_->RefCount(e.page) == 1;
    });
    if (victim == host_lru_.end()) return nullptr;
    DropHostLocked(host_index_.at(*victim));
    MutexLock lock(stats_mu_);
    ++stats_.evicted_l2;
  }
  auto page = host_->Allocate(1);
  if (!page.ok()) return nullptr;
  HostEntry e;
  e.key = key;
  e.parent = parent;
  e.page = (*page)[0];
  std::copy(tokens.begin(), tokens.end(), e.tokens.begin());
  e.lru = host_lru_.insert(host_lru_.end(), key);
  return &host_index_.emplace(key, e).first->second;
}

void TieredCache::DropHostLocked(HostEntry& e) {
  const int32_t page = e.page;
  host_lru_.erase(e.lru);
  host_index_.erase(e.key);
  host_->Release(std::span<const int32_t>(&page, 1));
}

void TieredCache::CopyL1ToHost(int32_t l1_page, uint64_t key) {
  int32_t host_page = -1;
  {
    MutexLock lock(host_mu_);
    auto it = host_index_.find(key);
    if (it == host_index_.end()) return;
    host_page = it->second.page;
  }
  // The entry is not ready, so nothing reads or evicts its page meanwhile.
  int64_t bytes = 0;
  ForEachSegment(l1_.layout(), [&](CacheBufferId b, int l, int64_t n) {
    std::memcpy(host_->Segment(b, l, host_page), l1_.Segment(b, l, l1_page), size_t(n));
    bytes += n;
  });
  {
    MutexLock lock(host_mu_);
    host_index_.at(key).ready = true;
  }
  MutexLock lock(stats_mu_);
  stats_.store_bytes_l2 += bytes;
}

TieredCache::Match TieredCache::Lookup(std::span<const int32_t> tokens, int64_t from_page, int64_t max_tokens,
                                      uint64_t root) {
  Match m;
  const int64_t n_full = std::min<int64_t>(int64_t(tokens.size()), max_tokens) / kPageTokens;
  if (from_page >= n_full) return m;
  const std::vector<uint64_t> keys = PageChainKeys(tokens, n_full, root);
  uint64_t parent = from_page > 0 ? keys[size_t(from_page - 1)] : root;
  int64_t i = from_page;
  {
    MutexLock lock(host_mu_);
    for (; i < n_full; ++i) {
      auto it = host_index_.find(keys[size_t(i)]);
      if (it == host_index_.end()) break;
      HostEntry& e = it->second;
      if (!e.ready || e.parent != parent ||
          !SameTokens(e.tokens, tokens.subspan(size_t(i * kPageTokens), kPageTokens))) {
        break;
      }
      if (host_->RefCount(e.page) == 1) ++l2_pinned_;
      host_->AddRef(std::span<const int32_t>(&e.page, 1));
      host_lru_.splice(host_lru_.end(), host_lru_, e.lru);
      m.l2_pages.push_back(e.page);
      parent = e.key;
    }
  }
  if (disk_subdir_.empty()) return m;
  MutexLock lock(disk_mu_);
  for (; i < n_full; ++i) {
    auto it = disk_index_.find(keys[size_t(i)]);
    if (it == disk_index_.end() || it->second.parent != parent ||
        !SameTokens(it->second.tokens, tokens.subspan(size_t(i * kPageTokens), kPageTokens))) {
      break;
    }
    ++m.l3_pages;
    parent = keys[size_t(i)];
  }
  return m;
}

void TieredCache::Unpin(std::span<const int32_t> l2_pages) {
  if (l2_pages.empty()) return;
  MutexLock lock(host_mu_);
  for (int32_t page : l2_pages) l2_pinned_ -= host_->RefCount(page) == 2;
  host_->Release(l2_pages);
}

std::shared_ptr<LayerGates> TieredCache::LoadIntoL1(std::vector<int32_t> l2_pages, std::vector<int32_t> l1_pages) {
  auto gates = std::make_shared<LayerGates>(l1_.layout().n_layers());
  pending_loads_.push_back(gates);
  Submit([this, gates, src = std::move(l2_pages), dst = std::move(l1_pages)] {
    const auto t0 = Env::Default().Now();
    const int64_t bytes = CopyLoad(src, dst, *gates);
    Unpin(src);
    MutexLock lock(stats_mu_);
    ++stats_.loads;
    stats_.load_bytes_l2 += bytes;
    stats_.load_seconds += std::chrono::duration<double>(Env::Default().Now() - t0).count();
  });
  return gates;
}

std::shared_ptr<LayerGates> TieredCache::LoadMatch(Match& m, const std::function<bool(int64_t)>& make_room,
                                                   std::vector<int32_t>* l1_pages) {
  const int64_t n = int64_t(m.l2_pages.size());
  if (n == 0) return nullptr;
  while (l1_.free_pages() < n && make_room && make_room(n - l1_.free_pages())) {
  }
  auto fresh = l1_.free_pages() >= n ? l1_.Allocate(n) : StatusOr<std::vector<int32_t>>(ResourceExhausted("L1 is full"));
  if (!fresh.ok()) {
    Unpin(m.l2_pages);
    m.l2_pages.clear();
    return nullptr;
  }
  l1_pages->insert(l1_pages->end(), fresh->begin(), fresh->end());
  return LoadIntoL1(std::exchange(m.l2_pages, {}), std::move(fresh).value());
}

// ---------------------------------------------------------------- write policies

void TieredCache::StoreFromL1(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, int32_t page) {
  {
    MutexLock lock(host_mu_);
    if (ReserveHostLocked(key, parent, tokens) == nullptr) return;
  }
  l1_.AddRef(std::span<const int32_t>(&page, 1));  // until the copy is done
  ++l1_refs_held_;
  Submit([this, page, key] {
    CopyL1ToHost(page, key);
    {
      MutexLock lock(job_mu_);
      l1_to_release_.push_back(page);  // the L1 page is no longer needed
    }
    if (!disk_subdir_.empty()) (void)WriteDisk(key);  // failures are counted in disk_errors
  });
}

void TieredCache::OnL1Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages, uint64_t root) {
  if (options_.policy != WritePolicy::kWriteThrough) return;
  const int64_t n = std::min<int64_t>(int64_t(tokens.size()) / kPageTokens, int64_t(pages.size()));
  const std::vector<uint64_t> keys = PageChainKeys(tokens, n, root);
  for (size_t i = 0; i < keys.size(); ++i) {
    StoreFromL1(keys[i], i > 0 ? keys[i - 1] : root, tokens.subspan(i * kPageTokens, kPageTokens),
                pages[i]);
  }
}

void TieredCache::OnL1Hit(std::span<const int32_t> tokens, std::span<const int32_t> pages, uint64_t root) {
  if (options_.policy != WritePolicy::kWriteThroughSelective) return;
  const std::vector<uint64_t> keys = PageChainKeys(tokens, int64_t(pages.size()), root);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (++l1_hits_[keys[i]] != options_.selective_hits) continue;
    StoreFromL1(keys[i], i > 0 ? keys[i - 1] : root, tokens.subspan(i * kPageTokens, kPageTokens),
                pages[i]);
  }
  if (l1_hits_.size() > 1u << 20) l1_hits_.clear();  // bounded; counts restart
}

void TieredCache::OnL1Evict(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, int32_t page) {
  l1_hits_.erase(key);
  if (options_.policy != WritePolicy::kWriteBack) return;
  {
    MutexLock lock(host_mu_);
    if (ReserveHostLocked(key, parent_key, tokens) == nullptr) return;
  }
  CopyL1ToHost(page, key);  // now: the page is about to be freed
  if (!disk_subdir_.empty()) Submit([this, key] { (void)WriteDisk(key); });
}

// ---------------------------------------------------------------- stats

TierStats TieredCache::stats() const {
  TierStats s;
  {
    MutexLock lock(stats_mu_);
    s = stats_;
  }
  {
    MutexLock lock(host_mu_);
    s.l2_pages_total = host_->total_pages();
    s.l2_pages_used = int64_t(host_index_.size());
    s.l2_pinned = l2_pinned_;
  }
  MutexLock lock(disk_mu_);
  s.l3_pages = int64_t(disk_index_.size());
  s.l3_bytes = disk_bytes_;
  return s;
}

void TieredCache::RecordHits(int64_t l1_tokens, int64_t l2_tokens, int64_t l3_tokens) {
  MutexLock lock(stats_mu_);
  stats_.hit_tokens_l1 += l1_tokens;
  stats_.hit_tokens_l2 += l2_tokens;
  stats_.hit_tokens_l3 += l3_tokens;
}

Status TieredCache::CheckAccounting() const {
  MutexLock lock(host_mu_);
  TANDEM_RETURN_IF_ERROR(host_->CheckAccounting());
  if (host_->reserved_pages() != 0) return Internal("host tier has reserved pages");
  if (host_->used_pages() != int64_t(host_index_.size())) {
    return Internal("host tier: " + std::to_string(host_->used_pages()) + " pages used for " +
                    std::to_string(host_index_.size()) + " entries");
  }
  for (const auto& [key, e] : host_index_) {
    if (host_->RefCount(e.page) != 1) return Internal("host tier page " + std::to_string(e.page) + " is still pinned");
  }
  if (l2_pinned_ != 0) return Internal("host tier counts " + std::to_string(l2_pinned_) + " pinned pages, holds none");
  MutexLock dlock(disk_mu_);
  int64_t bytes = 0;
  for (const auto& [key, e] : disk_index_) bytes += e.bytes;
  if (bytes != disk_bytes_) return Internal("disk tier byte count is off");
  if (disk_bytes_ > options_.disk_bytes && !disk_subdir_.empty()) return Internal("disk tier is over its size");
  return Status::Ok();
}

}  // namespace tandem
