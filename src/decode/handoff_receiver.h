// The decode side of the handoff. Owned by the decode engine's loop thread
// (not thread-safe); message handlers post into that thread.
//
// Begin reserves pages for the part of the prompt not already in the local
// prefix cache and produces the Destination. A Commit is the only thing that
// makes a handoff usable (invariant 2): its byte counts must match, and its
// per-buffer digests too when verification asks. Abort never frees pages a
// late write may still land in (invariant 4): they are quarantined until the
// prefill side acknowledges (it acks only after flushing) or the connection to
// that peer is closed.
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <vector>

#include "cache/page_pool.h"
#include "decode/write_windows.h"
#include "prefix/tiers.h"
#include "prefix/prefix_index.h"
#include "transfer/handoff_state.h"
#include "transfer/messages.h"
#include "transfer/transport.h"

namespace tandem::transfer {

enum class VerifyMode { kOff, kSample, kAll };

struct ReceiverOptions {
  HandoffDeadlines deadlines;
  int32_t vocab_size = 0;  // a Commit's first token must lie in [0, vocab_size); 0: unchecked
  VerifyMode verify = VerifyMode::kAll;
  uint32_t sample_every = 8;  // kSample: verify one handoff in this many
};

struct ReceiverStats {
  int64_t committed = 0, failed = 0, aborted = 0, verified = 0, digest_mismatches = 0;
  int64_t quarantined_pages = 0;  // current
  std::vector<int64_t> committed_bytes;  // per cache buffer (registry order), of committed handoffs
};

class HandoffReceiver {
 public:
  // `pool` lives in `region` (the transport-registered arena peers write into).
  HandoffReceiver(PagePool& pool, RemoteKey region_key, PrefixIndex* index, ReceiverOptions options);
  ~HandoffReceiver();

  // `cache_salt`: the request's tenant (RequestSpec::cache_salt): its prefix
  // is looked up under that tenant's root only, and the Destination carries it.
  StatusOr<Destination> Begin(uint64_t handoff_id, std::vector<int32_t> prompt, uint64_t peer,
                              Clock::time_point now, uint64_t cache_salt = 0);

  // A host tier under the prefix index (may be null): Begin also loads the
  // prompt's prefix from L2, which shortens what the prefill side must send.
  void SetTiers(TieredCache* tiers) { tiers_ = tiers; }
  // Where peers' puts are checked (decode/write_windows.h; may be null): the
  // pages reserved for a peer are open to it until committed or freed.
  void SetWriteWindows(WriteWindows* windows) { windows_ = windows; }

  struct Ready {
    uint64_t handoff_id = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> pages;  // cover the whole prompt; the caller owns one reference each
    int32_t first_token = 0;
    uint64_t compute_us = 0, transfer_us = 0;  // as the sender measured them
    int64_t cached_tokens = 0;  // prompt tokens found in this engine's prefix cache (not sent)
    uint64_t queue_us = 0;      // as the sender measured it
  };
  // Validates everything before anything changes (first token in the
  // vocabulary, the reservation it names, byte counts, digests when
  // verifying), then publishes. `peer` is the connection it came on; a
  // Commit from another peer than the handoff's is refused and changes
  // nothing. On any other error the handoff has failed and its pages are
  // free again: a Commit is only sent after the sender's flush, so nothing is
  // still in flight.
  //
  // `message`: the connection's number of the message that carried it
  // (WriteWindows::MessageArrived), where write windows are kept. A put into
  // the handoff's pages allowed after it (the peer wrote after saying it was
  // done; those bytes may still be landing) fails the handoff with
  // PermissionDenied and keeps its pages quarantined: the caller closes the
  // connection, whose fence frees them (OnPeerClosed).
  StatusOr<Ready> OnCommit(const Commit& commit, uint64_t peer, Clock::time_point now,
                           std::optional<uint64_t> message = std::nullopt);

  // Ends a handoff that has not committed; returns the Abort to send to its peer.
  StatusOr<Abort> StartAbort(uint64_t handoff_id, AbortCode code, std::string reason, Clock::time_point now);
  // The peer stopped writing and flushed: a quarantined handoff's pages are free.
  // Ignored unless it comes from the handoff's own peer.
  // `message` as for OnCommit: false when a put into its pages came after it
  // (the pages stay quarantined; the caller closes the connection).
  bool OnAbortAck(uint64_t handoff_id, uint64_t peer, std::optional<uint64_t> message = std::nullopt);
  // The connection to `peer` is closed: no write of it can land any more, so
  // its quarantined pages are freed and its open handoffs fail.
  void OnPeerClosed(uint64_t peer, Clock::time_point now);
  // We closed the connection to a live `peer` whose writes may still land
  // (transport without a closing fence): its open handoffs fail, and every
  // page of it stays quarantined until OnPeerClosed(peer) says the writes stopped.
  void OnPeerSuspended(uint64_t peer, Clock::time_point now);
  // Handoffs whose state deadline has passed (the caller aborts them).
  std::vector<uint64_t> Expired(Clock::time_point now) const;
  // The current state deadline of an open handoff (time_point::max() if none).
  Clock::time_point deadline(uint64_t handoff_id) const;
  // Peers holding a quarantine that began before `cutoff`: an abort they
  // never acknowledged. Closing the connection to them ends it.
  std::vector<uint64_t> PeersQuarantinedSince(Clock::time_point cutoff) const;

  HandoffState state(uint64_t handoff_id) const;
  const ReceiverStats& stats() const { return stats_; }
  size_t open_handoffs() const;

 private:
  struct Entry {
    uint64_t id = 0;
    uint64_t peer = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> cached_pages;    // prefix hit: referenced, already valid
    std::vector<int32_t> reserved_pages;  // written by the peer
    int64_t skip_tokens = 0;
    HandoffStateMachine machine;
    bool quarantined = false;
    std::shared_ptr<LayerGates> gates;  // L2 load into the first cached pages
    uint64_t pages_digest = 0;          // PagesDigest of the Destination's page list
    Clock::time_point quarantined_at;
  };
  // The checks of OnCommit that change nothing.
  Status Validate(const Commit& c, const Entry& e, const std::vector<int32_t>& pages, bool verify);
  void Free(Entry& e);
  // Ends e's write window; false when the peer put into its pages after `message`.
  bool EndWindow(const Entry& e, std::optional<uint64_t> message);
  // Holds the peer-written pages (until ack or fence) and releases the cached ones.
  void Quarantine(Entry& e, Clock::time_point now);

  PagePool& pool_;
  const RemoteKey region_key_;
  PrefixIndex* index_;
  TieredCache* tiers_ = nullptr;
  WriteWindows* windows_ = nullptr;
  const ReceiverOptions options_;
  std::map<uint64_t, std::unique_ptr<Entry>> entries_;  // open, and quarantined, handoffs
  ReceiverStats stats_;
  uint64_t commits_seen_ = 0;
};

}  // namespace tandem::transfer
