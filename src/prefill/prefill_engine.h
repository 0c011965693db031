// The prefill role: decode engines connect, send Destinations, and receive
// each prompt's cache and its first token.
//
// The prompts run on the same engine as every other role (runtime/engine.h):
// many requests' prompt chunks are batched per step under the token budget,
// with prefix reuse, tiers, preemption and deadlines. As each layer of a step
// finishes, each request's pages of that layer are written straight into its
// own destination; when its last chunk is done the connection is flushed and
// only then is its Commit sent (invariant 2).
//
// Every handoff is named by (connection, handoff id): two decode engines (or
// one before and after a restart) may use the same ids without touching each
// other's work. Every waiting state ends (docs/handoff-states.md): the queue
// is bounded (a full queue refuses with an Abort that says so), a handoff past
// its time budget ends with an Abort, a connection silent past the peer
// timeout is closed and its handoffs dropped. An Abort cancels the handoff
// (the engine drops it at its next step) and is acknowledged only after a
// flush of its writes succeeded; one whose flush cannot be confirmed closes
// the connection instead (the fence: a closed endpoint delivers no more writes).
//
// Threads: transport threads call OnAccept/OnMessage/OnClose; the engine's
// loop thread calls the EngineRole methods; one heartbeat thread. mu_ guards
// the links and the handoff table (GUARDED_BY, checked by clang's
// -Wthread-safety); page writes and flushes run outside it.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <thread>

#include "common/env.h"
#include "common/mutex.h"
#include "runtime/engine.h"
#include "runtime/engine_role.h"
#include "prefill/handoff_sender.h"
#include "transfer/messages.h"
#include "transfer/cluster_key.h"
#include "transfer/handoff_state.h"
#include "transfer/transport.h"

namespace tandem {

struct PrefillOptions {
  // The time peer liveness, handoff deadlines and stage timings are kept by
  // (tests give a fake one); the engine's too (Create sets engine.env to it).
  // Transports wait on the real clock: they are given the time left.
  const Env* env = &Env::Default();
  // The scheduler: pool size (cache_tokens), chunk_size, max_batch_tokens,
  // max_running (prompts batched together), prefix cache, tiers, threads.
  EngineOptions engine;
  size_t max_queue = 256;                             // handoffs waiting to be scheduled, all connections together
  std::chrono::milliseconds peer_timeout{5000};       // silence that declares a decode engine dead
  std::chrono::milliseconds heartbeat_interval{500};  // how often this engine says it is alive
  transfer::ClusterKey cluster_key;                   // decode engines must prove it (transfer/cluster_key.h)
  bool allow_mixed_numerics = false;  // serve decode engines of other numerics (transfer/handshake.h)
};

namespace transfer {
class MessageAuth;
}  // namespace transfer

// One request's chunk of a step, as the layer writes see it.
struct PrefilledChunk {
  uint64_t request = 0;               // RequestHandle::id()
  int64_t begin = 0, end = 0;         // tokens computed in this step: [begin, end)
  std::span<const int32_t> pages;     // the request's page table, covering [0, end)
  const LayerGates* gates = nullptr;  // a load still landing in its cached prefix, or null
};

// The prefill role (runtime/engine_role.h) and its endpoint's handlers.
class PrefillEngine : public EngineRole {
 public:
  static StatusOr<std::unique_ptr<PrefillEngine>> Create(const Model& model, PrefillOptions options);
  ~PrefillEngine() override;  // Stop()
  // Ends every handoff and joins the threads; afterwards no method touches a
  // connection. Call before the transport goes away.
  void Stop();

  // Transport thread: a decode engine connected (it must say Hello within the peer timeout).
  void OnAccept(std::shared_ptr<transfer::Connection> connection) EXCLUDES(mu_);
  // Transport thread: a message from the decode engine on `connection`.
  void OnMessage(std::shared_ptr<transfer::Connection> connection, const std::vector<uint8_t>& bytes) EXCLUDES(mu_);
  // Transport thread: `connection` is gone; its handoffs end (no write of it can land any more).
  void OnClose(uint64_t connection_id) EXCLUDES(mu_);

  // The listener's gate (transfer/transport.h, FirstMessageGate), on the
  // acceptor thread: a connection's first message must be a decode Hello this
  // engine would take, key proof included (its replay is checked when the
  // engine takes it). Refused: `reply` is this engine's Hello, so the decode
  // side can say what differs.
  Status CheckFirstMessage(std::span<const uint8_t> bytes, std::vector<uint8_t>* reply) const;

  // Where the transport listens ("host:port", the port it bound), so a decode
  // Hello meant for another engine is refused (transfer::AddressIsMine).
  // Until set: not checked.
  void SetListenAddress(std::string address) EXCLUDES(address_mu_) {
    MutexLock lock(address_mu_);
    listen_address_ = std::move(address);
  }

  std::string layout_fingerprint() const { return layout_fingerprint_; }
  uint64_t instance_id() const { return instance_id_; }
  const std::string& weights_identity() const { return weights_identity_; }
  Engine& engine() { return *engine_; }

  struct Stats {
    int64_t committed = 0, failed = 0, aborted = 0;
    int64_t refused = 0;        // Destinations refused: queue full, bad destination, no valid Hello
    int64_t peers_closed = 0;   // connections closed for silence, a refused Hello or an unconfirmed flush
    int64_t connections = 0;    // open now
    int64_t queued = 0;         // waiting to be scheduled, now
    int64_t in_flight = 0;      // handoffs taken and not yet ended, now
    int64_t pages_in_use = 0;   // of this engine's own pool, beyond the prefix cache; 0 when idle
    int64_t cached_pages = 0;   // held by the prefix cache
    int64_t cached_tokens = 0;  // prompt tokens not computed because they were cached
  };
  // The engine's counts as of its last step (exact when idle).
  Stats stats() const EXCLUDES(mu_);

  // EngineRole: the engine's loop thread. Every registered buffer of each
  // layer of a step goes to its request's destination as soon as it is
  // written; a request ends when its prompt is done, with a Commit (or an
  // Abort saying why).
  void Attach(RoleHost& host) override { host_ = &host; }
  bool WatchesLayers() const override { return true; }
  void BeforeForward(std::span<Sequence* const> members, std::span<const SequenceChunk> batch) override;
  void OnLayer(int layer) override EXCLUDES(mu_);
  void AfterForward() override { step_.clear(); }
  bool SharesPromptEarly() const override { return false; }
  std::optional<FinishReason> TakeToken(Sequence& seq, int32_t first_token) override EXCLUDES(mu_);
  void BeforeRelease(const Sequence& seq) override EXCLUDES(mu_);
  void OnEnd(const Sequence& seq, FinishReason reason, const Status& error) override EXCLUDES(mu_);

 private:
  struct Peer {
    std::shared_ptr<transfer::Connection> connection;
    bool hello_ok = false;
    uint64_t decode_instance = 0;
    std::vector<uint8_t> nonce;  // ours on this connection: its destinations prove the key over it
    transfer::Clock::time_point last_heard;
    // From an accepted Hello: the session (transfer/message_auth.h) that opens
    // the peer's messages, and `connection` sealing ours. Our Hello answer
    // goes out plain; `answered` once it has.
    std::shared_ptr<transfer::MessageAuth> auth;
    std::shared_ptr<transfer::Connection> sealed;
    bool answered = false;
    int64_t opened = 0;  // sealed messages taken from the peer
  };
  // One Destination taken. Fields marked "loop" belong to the engine's loop
  // thread; the others are guarded by mu_.
  struct Handoff {
    // Its state machine's deadlines are all the destination's time budget
    // (the engine's request deadline enforces it).
    Handoff(std::chrono::milliseconds budget, transfer::Clock::time_point now)
        : machine(transfer::HandoffSide::kPrefill, {budget, budget, budget}, now) {}
    Handoff(const Handoff&) = delete;  // its sender refers to its destination: it stays where it was made
    Handoff& operator=(const Handoff&) = delete;
    // Bootstrapping (taken) -> Transferring (its first layer written) ->
    // Committed (flushed, Commit sent); Aborted (the decode side asked, or its
    // connection went) or Failed otherwise (transfer/handoff_state.h).
    transfer::HandoffStateMachine machine;
    Destination destination;
    std::shared_ptr<transfer::Connection> connection;
    std::shared_ptr<RequestHandle> handle;
    uint64_t decode_instance = 0;
    transfer::Clock::time_point deadline;
    std::unique_ptr<HandoffSender> sender;  // loop: its writes into the destination
    bool abort_requested = false, peer_gone = false;
    int64_t sent_upto = 0;       // loop: rows below this token are written (from skip_tokens)
    int64_t step_from = 0;       // loop: first token the current step's layers write
    bool out_of_budget = false;  // loop: `error` says its time budget ran out
    Status error;                // loop: a write or flush failed
    transfer::Clock::time_point compute_start{};  // loop: its first layer written
    transfer::Clock::time_point taken{};          // when its destination was taken (set once, at creation)
  };
  PrefillEngine(const Model& model, PrefillOptions options);
  void RunHeartbeats() EXCLUDES(mu_);
  // Loop thread: waits (bounded) until h's posted writes have landed; a flush
  // that does not confirm is final for h (OnEnd closes its connection).
  Status FlushWrites(Handoff& h);
  std::shared_ptr<Handoff> Find(uint64_t request) EXCLUDES(mu_);
  // The prompt is computed and its first token sampled: flush, then Commit.
  // False: the handoff is cancelled instead (its peer asked meanwhile, or it failed).
  bool SendCommit(uint64_t request, std::span<const int32_t> prompt, std::span<const int32_t> pages,
                  int32_t first_token) EXCLUDES(mu_);
  void EndHandoff(uint64_t request, const Status& status) EXCLUDES(mu_);
  // The handshake: our Hello to a decode instance (0: unknown), and the
  // checks of theirs (compatibility, the cluster key's proof, a replayed nonce
  // when `seen` is given).
  Hello OurHello(uint64_t theirs) const;
  Status CheckTheirHello(const Hello& mine, const StatusOr<Hello>& theirs, transfer::NonceMemory* seen) const;
  void OnHello(Peer& peer, const std::vector<uint8_t>& bytes) REQUIRES(mu_);
  void OnAuthenticMessage(Peer& peer, const std::vector<uint8_t>& bytes) REQUIRES(mu_);
  void OnDestination(Peer& peer, const std::shared_ptr<transfer::Connection>& connection,
                     const std::vector<uint8_t>& bytes) REQUIRES(mu_);
  void OnAbort(const std::shared_ptr<transfer::Connection>& connection, const std::vector<uint8_t>& bytes)
      REQUIRES(mu_);
  bool MayAnswerLocked(uint64_t decode_instance, uint64_t connection_id) REQUIRES(mu_);
  void AnswerDeferredHellosLocked() REQUIRES(mu_);
  void Refuse(transfer::Connection& c, uint64_t handoff_id, const std::string& why,
              AbortCode code = AbortCode::kRefused) REQUIRES(mu_);
  void DropPeerLocked(uint64_t connection_id) REQUIRES(mu_);

  const Model& model_;
  const PrefillOptions options_;
  const uint64_t instance_id_;
  const std::string weights_identity_;
  std::string layout_fingerprint_;
  std::string numerics_;  // engine_->numerics().HandshakeFingerprint(), set by Create
  mutable Mutex address_mu_;
  std::string listen_address_ GUARDED_BY(address_mu_);
  std::string ListenAddress() const EXCLUDES(address_mu_) {
    MutexLock lock(address_mu_);
    return listen_address_;
  }
  RoleHost* host_ = nullptr;                // the engine, from Attach
  std::vector<PrefilledChunk> step_;        // loop: the current step's chunks
  std::unique_ptr<Engine> engine_;  // its loop thread calls the role's methods
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Peer> peers_ GUARDED_BY(mu_);                           // by connection id
  std::map<uint64_t, std::shared_ptr<Handoff>> handoffs_ GUARDED_BY(mu_);    // by request id
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> by_peer_ GUARDED_BY(mu_);  // (connection, handoff id) -> request
  // Hellos answered once no handoff of an earlier connection of the same
  // decode instance is left.
  std::vector<std::pair<std::shared_ptr<transfer::Connection>, Hello>> deferred_hellos_ GUARDED_BY(mu_);
  // The decode Hellos' nonces seen lately (cluster key only): a Hello recorded
  // and sent again is refused, so a replay cannot pass for its decode engine
  // (and drop that engine's live connections as stale). Bounded.
  transfer::NonceMemory seen_nonces_ GUARDED_BY(mu_);
  // Closed connections of each decode instance not yet released (puts of them
  // may still land).
  std::map<uint64_t, std::vector<std::shared_ptr<transfer::Connection>>> closing_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;  // Stop() began: no new handoffs
  bool stop_ GUARDED_BY(mu_) = false;      // the heartbeat thread ends
  Stats stats_ GUARDED_BY(mu_);
  std::thread heartbeat_thread_;
};

}  // namespace tandem
