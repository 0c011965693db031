#include "decode/handoff_receiver.h"

#include <algorithm>

#include "transfer/checksum.h"

namespace tandem::transfer {

HandoffReceiver::HandoffReceiver(PagePool& pool, RemoteKey region_key, PrefixIndex* index,
                                 ReceiverOptions options)
    : pool_(pool), region_key_(std::move(region_key)), index_(index), options_(options) {}

HandoffReceiver::~HandoffReceiver() {
  for (auto& [id, e] : entries_) Free(*e);
}

void HandoffReceiver::Free(Entry& e) {
  if (e.gates) e.gates->WaitAll();  // nothing may land in a page after it is freed
  e.gates.reset();
  if (!e.cached_pages.empty()) pool_.Release(e.cached_pages);
  if (!e.reserved_pages.empty()) {
    if (windows_) windows_->Close(e.peer, e.id);  // nothing of the peer's lands in them any more
    pool_.CancelReservation(e.reserved_pages);
  }
  if (e.quarantined) stats_.quarantined_pages -= int64_t(e.reserved_pages.size());
  e.cached_pages.clear();
  e.reserved_pages.clear();
}

StatusOr<Destination> HandoffReceiver::Begin(uint64_t handoff_id, std::vector<int32_t> prompt,
                                             uint64_t peer, Clock::time_point now, uint64_t cache_salt) {
  const uint64_t root = CacheRoot(cache_salt);
  if (prompt.empty()) return InvalidArgument("handoff of an empty prompt");
  if (entries_.count(handoff_id)) return InvalidArgument("handoff " + std::to_string(handoff_id) + " already exists");
  auto e = std::make_unique<Entry>(Entry{handoff_id, peer, std::move(prompt), {}, {}, 0,
                                         HandoffStateMachine(HandoffSide::kDecode, options_.deadlines, now), false,
                                         nullptr, 0, {}});
  if (index_) {
    PrefixIndex::Match hit = index_->Lookup(e->prompt, int64_t(e->prompt.size()) - 1, /*partial=*/false, root);
    e->cached_pages = std::move(hit.pages);
    e->skip_tokens = hit.tokens;
  }
  const int64_t total_pages = (int64_t(e->prompt.size()) + kPageTokens - 1) / kPageTokens;
  if (tiers_) {
    // More of the prefix from L2 (not L3: a disk read would hold up this
    // loop thread; those pages are sent by the prefill side instead).
    const int64_t l1 = int64_t(e->cached_pages.size());
    TieredCache::Match m = tiers_->Lookup(e->prompt, l1, int64_t(e->prompt.size()) - 1, root);
    // Room for the whole rest of the prompt, or no load (the prefill side sends it).
    const int64_t rest = total_pages - l1;
    if (index_ && pool_.free_pages() < rest) index_->Evict(rest - pool_.free_pages());
    if (pool_.free_pages() >= rest) {
      e->gates = tiers_->LoadMatch(m, nullptr, &e->cached_pages);
      e->skip_tokens = int64_t(e->cached_pages.size()) * kPageTokens;
    } else {
      tiers_->Unpin(m.l2_pages);
    }
    tiers_->RecordHits(l1 * kPageTokens, int64_t(e->cached_pages.size() - size_t(l1)) * kPageTokens, 0);
  }
  const int64_t need = total_pages - int64_t(e->cached_pages.size());
  if (index_ && pool_.free_pages() < need) index_->Evict(need - pool_.free_pages());
  auto reserved = pool_.Reserve(need);
  if (!reserved.ok()) {
    Free(*e);
    return reserved.status();  // the caller retries until the Bootstrapping deadline
  }
  e->reserved_pages = std::move(reserved).value();
  if (Status st = e->machine.Transition(HandoffState::kWaitingForInput, now); !st.ok()) {
    Free(*e);
    return st;
  }
  if (windows_) windows_->Open(peer, handoff_id, e->reserved_pages);  // from here on it may be told
  Destination d;
  d.handoff_id = handoff_id;
  d.skip_tokens = e->skip_tokens;
  d.tokens = e->prompt;
  for (int32_t p : e->reserved_pages) d.pages.push_back({p, pool_.Generation(p)});
  d.remote_key = region_key_.blob;
  d.pool_pages = pool_.total_pages();
  d.cache_salt = cache_salt;
  e->pages_digest = PagesDigest(d.pages);
  entries_.emplace(handoff_id, std::move(e));
  return d;
}

bool HandoffReceiver::EndWindow(const Entry& e, std::optional<uint64_t> message) {
  if (!windows_) return true;
  if (!message) {
    windows_->Close(e.peer, e.id);
    return true;
  }
  return windows_->CloseIfQuiet(e.peer, e.id, *message);
}

StatusOr<HandoffReceiver::Ready> HandoffReceiver::OnCommit(const Commit& c, uint64_t peer, Clock::time_point now,
                                                           std::optional<uint64_t> message) {
  auto it = entries_.find(c.handoff_id);
  if (it != entries_.end() && it->second->peer != peer) {
    return FailedPrecondition("commit for handoff " + std::to_string(c.handoff_id) + " from another peer");
  }
  if (it != entries_.end() && it->second->quarantined) {
    // We aborted it, but the sender committed first. A Commit follows the
    // sender's flush, so nothing of it is still in flight: it acknowledges
    // the abort as well as an AbortAck would.
    if (!EndWindow(*it->second, message)) {
      return PermissionDenied("a put into handoff " + std::to_string(c.handoff_id) +
                              "'s pages came after its Commit: its pages stay quarantined until the connection closes");
    }
    Free(*it->second);
    entries_.erase(it);
    return FailedPrecondition("commit for handoff " + std::to_string(c.handoff_id) + " which was already aborted");
  }
  if (it == entries_.end() || it->second->machine.state() != HandoffState::kWaitingForInput) {
    return FailedPrecondition("commit for handoff " + std::to_string(c.handoff_id) +
                              " which is not waiting for input");
  }
  Entry& e = *it->second;
  if (!EndWindow(e, message)) {
    // Bytes sent after the Commit may still be landing: nothing is
    // published or freed until the connection's fence.
    (void)e.machine.Transition(HandoffState::kFailed, now);
    ++stats_.failed;
    Quarantine(e, now);
    return PermissionDenied("a put into handoff " + std::to_string(c.handoff_id) +
                            "'s pages came after its Commit: the handoff fails, its pages quarantined until the "
                            "connection closes");
  }
  if (e.gates) e.gates->WaitAll();  // long done by now: it started with the handoff
  std::vector<int32_t> pages = e.cached_pages;
  pages.insert(pages.end(), e.reserved_pages.begin(), e.reserved_pages.end());
  const bool verify = options_.verify == VerifyMode::kAll ||
                      (options_.verify == VerifyMode::kSample && commits_seen_ % options_.sample_every == 0);
  ++commits_seen_;
  if (Status st = Validate(c, e, pages, verify); !st.ok()) {
    (void)e.machine.Transition(HandoffState::kFailed, now);
    ++stats_.failed;
    Free(e);
    entries_.erase(it);
    return st;
  }
  TANDEM_RETURN_IF_ERROR(e.machine.Transition(HandoffState::kCommitted, now));
  pool_.CommitReservation(e.reserved_pages);
  ++stats_.committed;
  if (stats_.committed_bytes.size() < c.digests.size()) stats_.committed_bytes.resize(c.digests.size());
  for (size_t b = 0; b < c.digests.size(); ++b) stats_.committed_bytes[b] += int64_t(c.digests[b].bytes);
  Ready r{c.handoff_id, std::move(e.prompt), std::move(pages), c.first_token, c.compute_us, c.transfer_us,
          e.skip_tokens, c.queue_us};
  entries_.erase(it);
  return r;
}

Status HandoffReceiver::Validate(const Commit& c, const Entry& e, const std::vector<int32_t>& pages, bool verify) {
  if (c.first_token < 0 || (options_.vocab_size > 0 && c.first_token >= options_.vocab_size)) {
    return DataLoss("commit's first token " + std::to_string(c.first_token) + " is outside the vocabulary of " +
                    std::to_string(options_.vocab_size));
  }
  if (c.pages_digest != e.pages_digest) {
    return DataLoss("commit names another page reservation than handoff " + std::to_string(c.handoff_id) + "'s");
  }
  // Byte counts always; digests when verifying (hashing every byte costs a pass over them).
  const auto local = DigestPages(pool_, pages, e.skip_tokens, int64_t(e.prompt.size()));
  if (local.size() != c.digests.size()) {
    return DataLoss("commit carries " + std::to_string(c.digests.size()) + " buffer digests, expected " +
                    std::to_string(local.size()));
  }
  for (size_t b = 0; b < local.size(); ++b) {
    if (local[b].name != c.digests[b].name || local[b].bytes != c.digests[b].bytes) {
      return DataLoss("commit byte count for buffer '" + c.digests[b].name + "' does not match");
    }
  }
  if (!verify) return Status::Ok();
  ++stats_.verified;
  Status st = VerifyDigests(c.digests, local);
  if (!st.ok()) ++stats_.digest_mismatches;
  return st;
}

StatusOr<Abort> HandoffReceiver::StartAbort(uint64_t handoff_id, AbortCode code, std::string reason,
                                            Clock::time_point now) {
  auto it = entries_.find(handoff_id);
  if (it == entries_.end() || it->second->machine.terminal()) {
    return NotFound("no open handoff " + std::to_string(handoff_id));
  }
  Entry& e = *it->second;
  TANDEM_RETURN_IF_ERROR(e.machine.Transition(HandoffState::kAborted, now));
  ++stats_.aborted;
  Quarantine(e, now);
  return Abort{handoff_id, code, std::move(reason)};
}

void HandoffReceiver::Quarantine(Entry& e, Clock::time_point now) {
  // Cached prefix pages were never written by the peer: release them now,
  // once no load from our own L2 is still landing in them.
  if (e.gates) e.gates->WaitAll();
  e.gates.reset();
  if (!e.cached_pages.empty()) pool_.Release(e.cached_pages);
  e.cached_pages.clear();
  e.quarantined = true;
  e.quarantined_at = now;
  stats_.quarantined_pages += int64_t(e.reserved_pages.size());
}

bool HandoffReceiver::OnAbortAck(uint64_t handoff_id, uint64_t peer, std::optional<uint64_t> message) {
  auto it = entries_.find(handoff_id);
  if (it == entries_.end() || !it->second->quarantined || it->second->peer != peer) return true;  // duplicate, unknown, or not its peer
  if (!EndWindow(*it->second, message)) return false;  // quarantined until the connection's fence
  Free(*it->second);
  entries_.erase(it);
  return true;
}

void HandoffReceiver::OnPeerClosed(uint64_t peer, Clock::time_point now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = *it->second;
    if (e.peer != peer) {
      ++it;
      continue;
    }
    if (!e.machine.terminal()) {
      (void)e.machine.Transition(HandoffState::kFailed, now);
      ++stats_.failed;
    }
    Free(e);
    it = entries_.erase(it);
  }
  if (windows_) windows_->Forget(peer);
}

void HandoffReceiver::OnPeerSuspended(uint64_t peer, Clock::time_point now) {
  for (auto& [id, e] : entries_) {
    if (e->peer != peer || e->quarantined) continue;
    if (!e->machine.terminal()) {
      (void)e->machine.Transition(HandoffState::kFailed, now);
      ++stats_.failed;
    }
    Quarantine(*e, now);
  }
}

std::vector<uint64_t> HandoffReceiver::Expired(Clock::time_point now) const {
  std::vector<uint64_t> out;
  for (const auto& [id, e] : entries_) {
    if (e->machine.Expired(now)) out.push_back(id);
  }
  return out;
}

Clock::time_point HandoffReceiver::deadline(uint64_t handoff_id) const {
  auto it = entries_.find(handoff_id);
  return it == entries_.end() || it->second->machine.terminal() ? Clock::time_point::max()
                                                                : it->second->machine.deadline();
}

std::vector<uint64_t> HandoffReceiver::PeersQuarantinedSince(Clock::time_point cutoff) const {
  std::vector<uint64_t> out;
  for (const auto& [id, e] : entries_) {
    if (e->quarantined && e->quarantined_at < cutoff &&
        std::find(out.begin(), out.end(), e->peer) == out.end()) {
      out.push_back(e->peer);
    }
  }
  return out;
}

HandoffState HandoffReceiver::state(uint64_t handoff_id) const {
  auto it = entries_.find(handoff_id);
  return it == entries_.end() ? HandoffState::kCommitted : it->second->machine.state();
}

size_t HandoffReceiver::open_handoffs() const {
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += !e->machine.terminal();
  return n;
}

}  // namespace tandem::transfer
