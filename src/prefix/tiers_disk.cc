// The disk tier (L3) of TieredCache: page files that survive restarts, each
// checked (header, size, XXH3 of header and payload, the key's parent and
// tokens) before it is read into L2.
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cache/page_copy.h"
#include "common/env.h"
#include "common/keyed_fingerprint.h"
#include "common/log.h"
#include "prefix/tiers.h"
#include "prefix/tiers_internal.h"

namespace tandem {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace tiers_detail;

// ---------------------------------------------------------------- L3

namespace tiers_detail {

uint64_t PageChecksum(const DiskHeader& header, std::span<const uint8_t> payload) {
  DiskHeader h = header;
  h.page_xxh3 = 0;
  // The header's hash seeds the payload's: one value that changes with either.
  return XXH3_64bits_withSeed(payload.data(), payload.size(), XXH3_64bits(&h, sizeof(h)));
}

Status ClaimDiskDirectory(const std::string& subdir, const std::string& identity) {
  constexpr size_t kMaxIdentityBytes = 1 << 20;  // ours is ~16 KiB; a larger file is someone else's
  const fs::path path = fs::path(subdir) / "identity";
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    // A new folder, ours alone (the caller holds its lock, prefix/disk_folder.h).
    const std::string tmp = path.string() + "." + std::to_string(::getpid()) + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(identity.data(), std::streamsize(identity.size()));
    }
    fs::rename(tmp, path, ec);
    if (ec) fs::remove(tmp, ec);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Unavailable("cannot write the disk cache identity " + path.string());
  std::string stored(kMaxIdentityBytes + 1, '\0');
  in.read(stored.data(), std::streamsize(stored.size()));
  stored.resize(size_t(in.gcount()));
  if (stored == identity) return Status::Ok();
  return FailedPrecondition("the disk cache directory " + subdir +
                            " holds pages of another model or cache layout (they differ in " +
                            DescribeDifferingParts(identity, stored) +
                            "); remove it, or give this engine its own --disk-cache-dir");
}

}  // namespace tiers_detail

std::string TieredCache::PagePath(uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.page", (unsigned long long)key);
  return (fs::path(disk_subdir_) / name).string();
}

Status TieredCache::WriteDisk(uint64_t key) {
  const CacheLayout& layout = l1_.layout();
  DiskHeader h;
  std::vector<uint8_t> payload(size_t(layout.BytesPerPage()));
  {
    MutexLock lock(host_mu_);
    auto it = host_index_.find(key);
    if (it == host_index_.end() || !it->second.ready) return NotFound("page left L2 before it was written to disk");
    h.key = key;
    h.parent = it->second.parent;
    std::copy(it->second.tokens.begin(), it->second.tokens.end(), h.tokens);
    size_t at = 0;
    ForEachSegment(layout, [&](CacheBufferId b, int l, int64_t n) {
      std::memcpy(payload.data() + at, host_->Segment(b, l, it->second.page), size_t(n));
      at += size_t(n);
    });
  }
  {
    MutexLock lock(disk_mu_);
    if (disk_index_.count(key)) return Status::Ok();
  }
  h.payload_bytes = payload.size();
  h.page_xxh3 = PageChecksum(h, payload);
  const std::string path = PagePath(key), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    out.write(reinterpret_cast<const char*>(payload.data()), std::streamsize(payload.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      MutexLock lock(stats_mu_);
      ++stats_.disk_errors;
      return Unavailable("cannot write " + tmp);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // a crash leaves a .tmp, never half a page under its name
  if (ec) {
    fs::remove(tmp, ec);
    MutexLock lock(stats_mu_);
    ++stats_.disk_errors;
    return Unavailable("cannot rename " + tmp);
  }
  const int64_t bytes = int64_t(sizeof(h) + payload.size());
  {
    MutexLock lock(disk_mu_);
    DiskEntry e;
    e.parent = h.parent;
    std::copy(std::begin(h.tokens), std::end(h.tokens), e.tokens.begin());
    e.bytes = bytes;
    e.lru = disk_lru_.insert(disk_lru_.end(), key);
    disk_index_.emplace(key, e);
    disk_bytes_ += bytes;
    EvictDiskLocked();
  }
  MutexLock lock(stats_mu_);
  stats_.store_bytes_l3 += bytes;
  return Status::Ok();
}

void TieredCache::EvictDiskLocked() {
  while (disk_bytes_ > options_.disk_bytes && !disk_lru_.empty()) {
    const uint64_t key = disk_lru_.front();
    disk_lru_.pop_front();
    auto it = disk_index_.find(key);
    disk_bytes_ -= it->second.bytes;
    disk_index_.erase(it);
    std::error_code ec;
    fs::remove(PagePath(key), ec);
    MutexLock lock(stats_mu_);
    ++stats_.evicted_l3;
  }
}

Status TieredCache::ReadDisk(uint64_t key) {
  const CacheLayout& layout = l1_.layout();
  DiskHeader h;
  std::vector<uint8_t> payload(size_t(layout.BytesPerPage()));
  // A miss: the file goes, the error is counted and logged, the tokens are recomputed.
  auto bad = [&](const std::string& why) {
    std::error_code ec;
    fs::remove(PagePath(key), ec);
    {
      MutexLock lock(disk_mu_);
      auto it = disk_index_.find(key);
      if (it != disk_index_.end()) {
        disk_bytes_ -= it->second.bytes;
        disk_lru_.erase(it->second.lru);
        disk_index_.erase(it);
      }
    }
    {
      MutexLock lock(stats_mu_);
      ++stats_.disk_errors;
    }
    TLOG_WARN("disk cache page %s dropped: %s\n", PagePath(key).c_str(), why.c_str());
    return DataLoss("disk cache page " + PagePath(key) + " dropped: " + why);
  };
  {
    std::ifstream in(PagePath(key), std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(&h), sizeof(h))) return bad("short header");
    if (h.key != key || h.payload_bytes != payload.size()) return bad("header does not match");
    if (!in.read(reinterpret_cast<char*>(payload.data()), std::streamsize(payload.size()))) return bad("short payload");
  }
  if (PageChecksum(h, payload) != h.page_xxh3) return bad("checksum mismatch (bytes, key, parent or tokens)");
  bool indexed_as_read = true;
  {
    // What the lookup matched (from the start-up scan, or our own write) is
    // what the file holds, or the file changed under us.
    MutexLock lock(disk_mu_);
    auto it = disk_index_.find(key);
    indexed_as_read = it == disk_index_.end() ||
                      (it->second.parent == h.parent &&
                       SameTokens(it->second.tokens, std::span<const int32_t>(h.tokens, kPageTokens)));
  }
  if (!indexed_as_read) return bad("its parent or tokens are not the ones it was indexed under");
  int32_t host_page = -1;
  {
    MutexLock lock(host_mu_);
    HostEntry* e = ReserveHostLocked(key, h.parent, std::span<const int32_t>(h.tokens, kPageTokens));
    if (e == nullptr) return host_index_.count(key) ? Status::Ok() : ResourceExhausted("the host tier is full");
    host_page = e->page;
  }
  size_t at = 0;
  ForEachSegment(layout, [&](CacheBufferId b, int l, int64_t n) {
    std::memcpy(host_->Segment(b, l, host_page), payload.data() + at, size_t(n));
    at += size_t(n);
  });
  {
    MutexLock lock(host_mu_);
    host_index_.at(key).ready = true;
  }
  {
    MutexLock lock(disk_mu_);
    auto it = disk_index_.find(key);
    if (it != disk_index_.end()) disk_lru_.splice(disk_lru_.end(), disk_lru_, it->second.lru);
  }
  MutexLock lock(stats_mu_);
  stats_.load_bytes_l3 += int64_t(sizeof(h) + payload.size());
  return Status::Ok();
}

Status TieredCache::ScanDisk() {
  const int64_t expect = int64_t(sizeof(DiskHeader)) + l1_.layout().BytesPerPage();
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  std::error_code ec;
  fs::directory_iterator it(disk_subdir_, ec);
  if (ec) return Unavailable("cannot read the disk cache directory " + disk_subdir_ + ": " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Unavailable("cannot read the disk cache directory " + disk_subdir_ + ": " + ec.message());
    const fs::path path = it->path();
    std::error_code ignore;
    if (path.extension() == ".tmp") fs::remove(path, ignore);  // an interrupted write
    if (path.extension() != ".page") continue;
    const auto time = fs::last_write_time(path, ignore);
    files.emplace_back(time, path);
  }
  std::sort(files.begin(), files.end());  // oldest first: LRU order
  MutexLock lock(disk_mu_);
  for (const auto& [time, path] : files) {
    DiskHeader h;
    std::ifstream in(path, std::ios::binary);
    const bool ok = in.read(reinterpret_cast<char*>(&h), sizeof(h)) && std::memcmp(h.magic, DiskHeader{}.magic, sizeof(h.magic)) == 0 &&
                    int64_t(fs::file_size(path, ec)) == expect && PagePath(h.key) == path.string();
    if (!ok) {
      fs::remove(path, ec);
      continue;
    }
    DiskEntry e;
    e.parent = h.parent;
    std::copy(std::begin(h.tokens), std::end(h.tokens), e.tokens.begin());
    e.bytes = expect;
    e.lru = disk_lru_.insert(disk_lru_.end(), h.key);
    disk_index_.emplace(h.key, e);
    disk_bytes_ += expect;
  }
  EvictDiskLocked();
  return Status::Ok();
}

std::shared_ptr<TieredCache::Prefetch> TieredCache::PrefetchFromL3(std::span<const int32_t> tokens, int64_t from_page,
                                                                    int64_t max_tokens, uint64_t root) {
  auto p = std::make_shared<Prefetch>();
  p->deadline = Env::Default().Now() + options_.prefetch_deadline;
  const int64_t n_full = std::min<int64_t>(int64_t(tokens.size()), max_tokens) / kPageTokens;
  const std::vector<uint64_t> keys = PageChainKeys(tokens, n_full, root);
  std::vector<uint64_t> wanted(keys.begin() + std::min<int64_t>(from_page, n_full), keys.end());
  // Never more than half of L2: reading a chain must not evict its own start.
  if (int64_t(wanted.size()) > options_.host_pages / 2) wanted.resize(size_t(std::max<int64_t>(1, options_.host_pages / 2)));
  {
    MutexLock lock(stats_mu_);
    ++stats_.prefetches;
  }
  Submit([this, p, wanted = std::move(wanted)] {
    for (uint64_t key : wanted) {
      {
        MutexLock lock(disk_mu_);
        if (!disk_index_.count(key)) break;
      }
      if (Env::Default().Now() >= p->deadline) {
        MutexLock lock(stats_mu_);
        ++stats_.prefetch_misses;
        break;
      }
      BeforeDiskRead();
      if (!ReadDisk(key).ok()) break;
    }
    p->done = true;
  });
  return p;
}

}  // namespace tandem
