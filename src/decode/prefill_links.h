// The decode engine's links to its prefill engines over UCX: one transport,
// one region (the decode pool) that every prefill engine writes into, one
// link per prefill engine, the handoff receiver, and a queue of what arrived.
//
// Links heal. A link is Connecting (Hello sent, none accepted yet), Up
// (Hello accepted: layout and weights match) or Down (waiting to reconnect,
// with exponential backoff). Only Up links take handoffs. Both sides send a
// Heartbeat every heartbeat interval; a link silent past the peer timeout is
// declared dead: its connection is closed (the fence: a closed endpoint
// delivers no more writes), its quarantined pages are freed and its open
// handoffs fail at once (the engine may re-place them on another link).
// A restarted prefill engine is a new connection with its own handshake. A
// peer declared dead for silence (a wedge, not a crash) is on probation when
// it comes back: its link stays out of service until it has stayed live for
// two peer timeouts, so a peer that answers the handshake and then wedges
// again never looks healthy.
//
// Every handoff ends: committed, failed (its link died, the peer refused or
// failed it, a bad Commit) or aborted (deadline, or the engine cancelled
// it), and each of those reaches the engine through Poll() the moment it is
// known. Pages of an aborted handoff stay quarantined until the peer's
// AbortAck (sent after its flush) or the link's closure; a quarantine older
// than kAckWaitPeerTimeouts peer timeouts closes the link (a live peer's ack
// waits behind its current step and its queued writes; a silent one is
// declared dead after one peer timeout anyway).
//
// Thread safety: the decode engine's loop thread calls every method;
// transport threads only append to the inbox (mu_).
#pragma once

#include <deque>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/cached_prefixes.h"
#include "common/env.h"
#include "common/mutex.h"
#include "common/placement.h"
#include "model/cache_spec.h"
#include "decode/handoff_receiver.h"
#include "transfer/message_auth.h"
#include "cache/page_pool.h"
#include "common/sampling_params.h"
#include "transfer/cluster_key.h"
#include "transfer/transport_kind.h"

namespace tandem {
class PrefixIndex;
class TieredCache;
}  // namespace tandem

namespace tandem::decode {

struct PrefillLinksOptions {
  std::vector<std::string> addresses;  // "host:port" each
  // The addresses come from discovery (SetAddresses) and may be none at start.
  bool discovered = false;
  // What each prefill engine holds (its KV events, by address): a prompt goes
  // to the one holding its longest prefix; none, or none holding any: to the
  // one this side sent its prefix to before (as far as it remembers).
  const CachedPrefixes* cached = nullptr;
  size_t pool_bytes = 0;
  std::string layout_fingerprint, weights_identity;
  std::string numerics;               // NumericsIdentity::HandshakeFingerprint
  bool allow_mixed_numerics = false;  // link to prefill engines of other numerics (transfer/handshake.h)
  transfer::TransportKind transport = transfer::TransportKind::kAuto;
  std::chrono::milliseconds peer_timeout{5000};
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds reconnect_min{100}, reconnect_max{2000};
  // How long Attach waits for the first handshakes (requests before a link is
  // up would be refused).
  std::chrono::milliseconds startup_wait{5000};
  transfer::ReceiverOptions receiver;  // vocabulary, deadlines, verification
  transfer::ClusterKey cluster_key;    // prefill engines must prove it (transfer/cluster_key.h)
  // The transport the links use; empty: one of `transport`'s kind, with the
  // cluster key's knock (tests give a loopback or faulty one).
  std::function<StatusOr<std::unique_ptr<transfer::Transport>>()> make_transport;
  // The time liveness, backoff, probation and handoff deadlines are kept by
  // (tests give a fake one). Attach's start-up wait is on real time.
  const Env* env = &Env::Default();
};

class PrefillLinks {
 public:
  // A prompt computed elsewhere, its cache in this engine's pool.
  struct Ready {
    std::vector<int32_t> pages;  // cover the whole prompt; the engine owns one reference each
    int32_t first_token = 0;
    int64_t cached_tokens = 0;   // prompt tokens found in this engine's own prefix cache
    uint64_t compute_us = 0, transfer_us = 0;  // as the computing side measured them
    uint64_t queue_us = 0;                     // queued there before its first layer
  };
  // How a handoff ended.
  struct Outcome {
    uint64_t id = 0;
    Status status;           // not OK: the request's prompt could not be brought here
    bool retryable = false;  // the link's or the peer's failure, not the data's: place it again
    Ready ready;             // when OK
  };
  // Counters since start (and a few gauges), exported as the decode role's metrics.
  struct Counters {
    int64_t committed = 0, failed = 0, aborted = 0, verified = 0, digest_mismatches = 0;
    int64_t quarantined_pages = 0, in_flight = 0;
    int64_t links_up = 0, reconnects = 0, links_declared_dead = 0, affinity_hits = 0, cached_hits = 0;
    int64_t messages = 0;  // received from prefill engines, heartbeats included
    std::vector<int64_t> buffer_bytes;  // per cache buffer (registry order), of committed handoffs
  };

  // Allocates the decode pool's memory as a UCX region and starts connecting
  // to every prefill engine.
  static StatusOr<std::unique_ptr<PrefillLinks>> Connect(PrefillLinksOptions options);
  ~PrefillLinks();

  uint8_t* PoolMemory() { return region_.data; }
  uint64_t instance_id() const { return instance_id_; }
  // Must be called once, before any other method, with the pool built on
  // PoolMemory(). Waits (up to startup_wait) for the first handshakes.
  void Attach(PagePool& pool, PrefixIndex* index);
  void SetTiers(TieredCache* tiers) { receiver_->SetTiers(tiers); }

  // Reserves pages and sends the Destination to the next healthy prefill
  // engine — another than the one that failed `replaces` (an earlier handoff
  // of the same request, 0: none) when there is one. ResourceExhausted: no
  // pages yet; Unavailable: no healthy link.
  // `cache_salt`: the request's tenant (placement and the prefix it finds).
  Status Start(uint64_t handoff_id, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
               uint64_t replaces, uint64_t cache_salt = 0);
  // Ends an open handoff now; Poll reports nothing more for it.
  void Abort(uint64_t handoff_id, AbortCode code, const std::string& reason);

  // Handles everything that arrived, heartbeats, liveness, reconnects and
  // deadlines; returns the handoffs that ended since the last call.
  std::vector<Outcome> Poll();

  // Replaces the set of prefill engines (discovery's view; any thread; the
  // next Poll applies it). A new address is connected; one no longer named
  // takes no new handoff and its link closes once those on it have ended; a
  // name that comes back is connected again. At most kMaxLinks different
  // addresses over the links' life.
  void SetAddresses(std::vector<std::string> addresses);
  static constexpr size_t kMaxLinks = 256;

  // True while at least one prefill engine link is up.
  bool healthy() const;
  Counters counters() const;

 private:
  std::string problem() const;
  int64_t links_up() const;
  enum class LinkState { kConnecting, kUp, kDown };
  static constexpr int kAckWaitPeerTimeouts = 8;
  struct Link {
    std::string address;
    bool listed = true;  // false: discovery no longer names it (no new handoffs, then closed)
    std::shared_ptr<transfer::Connection> connection;  // null while down
    uint64_t connection_id = 0;                         // of `connection`; arrivals of others are stale
    LinkState state = LinkState::kDown;
    std::string problem = "not connected yet";
    std::string logged;  // the last problem written to the log (each is written once)
    uint64_t prefill_instance = 0;
    uint64_t known_instance = 0;  // the last one accepted (a change empties its share of affinity_)
    transfer::Clock::time_point last_heard, retry_at;
    // Connections we closed while the peer may still write (no closing fence):
    // their pages stay quarantined until this link's next accepted Hello,
    // which promises that no earlier connection of ours still writes.
    std::vector<uint64_t> suspended;
    bool probation = false;                   // it was declared dead for silence
    uint64_t silent_instance = 0;             // the instance declared dead (a new one is no suspect)
    transfer::Clock::time_point probation_until;  // Connecting -> Up no earlier
    std::chrono::milliseconds backoff{0};
    std::vector<uint8_t> nonce;          // ours, fresh per connection
    std::vector<uint8_t> prefill_nonce;  // the accepted Hello's: destinations prove the key over it
    // From the accepted Hello on: the session that opens the engine's messages
    // and seals ours (`connection` is then the sealed one).
    std::shared_ptr<transfer::MessageAuth> auth;
  };
  struct Arrival {
    size_t link;
    uint64_t connection_id;
    std::vector<uint8_t> bytes;  // empty with closed == true: the connection went away
    bool closed = false;
    bool timed_out = false;      // closed because the peer stopped answering (it may be alive)
    bool refused = false;        // the connection was never made: nothing listens there
    bool by_us = false;          // closed by this side: proves nothing about the peer
    std::string why;             // the transport's reason
    uint64_t message = 0;        // its number on the connection (WriteWindows::MessageArrived), or 0
  };
  explicit PrefillLinks(PrefillLinksOptions options);
  void Reconnect(size_t link, transfer::Clock::time_point now);
  // Marks a link down and closes its connection; its open handoffs fail
  // (reported by the next Poll). Its pages are freed when the peer's end is
  // gone (`peer_gone`) or the transport's close is a fence; otherwise they
  // wait for the fence (see Link::suspended).
  void LinkDown(size_t link, const std::string& why, bool peer_gone = false);
  void RunHeartbeats();
  void OnHello(size_t link, const std::vector<uint8_t>& bytes);
  void LinkUp(size_t link);
  void Handle(const Arrival& a, std::vector<Outcome>& out);
  void KeepAlive(transfer::Clock::time_point now);
  void ApplyAddresses(const std::vector<std::string>& addresses, transfer::Clock::time_point now);
  static long long Ms(transfer::Clock::duration d);  // whole milliseconds, for messages and budgets
  Hello MyHello(uint64_t peer_instance) const;

  const PrefillLinksOptions options_;
  const uint64_t instance_id_;
  std::unique_ptr<transfer::Transport> transport_;
  transfer::Region region_;
  std::vector<Link> links_;
  std::unique_ptr<transfer::HandoffReceiver> receiver_;
  // Checked by the transport's reader threads for every put (TCP): null until
  // Attach knows the pool, so no put lands before then.
  std::unique_ptr<transfer::WriteWindows> windows_owner_;
  std::atomic<transfer::WriteWindows*> windows_{nullptr};
  std::map<uint64_t, size_t> handoff_link_;  // open handoffs -> the link serving them
  std::vector<Outcome> ended_;               // ended outside Poll (dead links), not yet reported
  std::map<uint64_t, size_t> failed_on_;     // retryable failed handoffs -> their link, until re-placed
  size_t next_link_ = 0;
  AffinityMap affinity_;        // prompt prefixes (page chain keys) -> the link that computed them
  int64_t affinity_hits_ = 0;   // handoffs placed where a prefix of theirs was computed
  int64_t cached_hits_ = 0;     // handoffs placed where KV events say a prefix of theirs is held
  int64_t reconnects_ = 0, peers_declared_dead_ = 0, messages_ = 0;
  transfer::Clock::time_point Now() const { return options_.env->Now(); }
  Mutex mu_;
  std::condition_variable arrived_;
  std::deque<Arrival> inbox_ GUARDED_BY(mu_);
  std::optional<std::vector<std::string>> named_ GUARDED_BY(mu_);  // SetAddresses' newest, until Poll applies it
  // The heartbeat thread's view: connections of links not down. Its own
  // thread, so a slow engine step never makes us look dead to a prefill engine.
  std::map<size_t, std::shared_ptr<transfer::Connection>> beating_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::condition_variable stop_cv_;
  std::thread heartbeat_thread_;
};

}  // namespace tandem::decode
