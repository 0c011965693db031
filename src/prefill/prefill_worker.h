// The prefill engine's handoff loop: Destinations arrive from decode engines,
// one worker thread computes each prompt and streams its cache into the
// destination (HandoffSender), then commits.
//
// Every handoff is named by (connection, handoff id): two decode engines (or
// one before and after a restart) may use the same ids without touching each
// other's work. Every waiting state ends (docs/handoff-states.md): the queue
// is bounded (a full queue refuses with an Abort that says so), a queued
// handoff past its time budget is dropped with an Abort, a connection silent
// past the peer timeout is closed and its handoffs dropped. An Abort stops
// the handoff in flight at its next layer, drops a queued one, and is
// acknowledged only after the sender's flush succeeded; a sender that cannot
// confirm its flush closes the connection instead (the fence: a closed
// endpoint delivers no more writes).
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "transfer/handoff_sender.h"

namespace tandem {

struct PrefillOptions {
  transfer::SenderOptions sender;
  size_t max_queue = 256;                             // queued handoffs, all connections together
  std::chrono::milliseconds peer_timeout{5000};       // silence that declares a decode engine dead
  std::chrono::milliseconds heartbeat_interval{500};  // how often this engine says it is alive
};

class PrefillWorker {
 public:
  PrefillWorker(const Model& model, const CacheSpec& spec, int threads, int64_t pool_pages, PrefillOptions options);
  ~PrefillWorker();  // Stop()
  // Aborts the handoff in flight and joins the threads; afterwards no method
  // touches a connection. Call before the transport goes away.
  void Stop();

  // Transport thread: a decode engine connected (it must say Hello within the peer timeout).
  void OnAccept(std::shared_ptr<transfer::Connection> connection);
  // Transport thread: a message from the decode engine on `connection`.
  void OnMessage(std::shared_ptr<transfer::Connection> connection, const std::vector<uint8_t>& bytes);
  // Transport thread: `connection` is gone; its handoffs end (no write of it can land any more).
  void OnClose(uint64_t connection_id);
  std::string layout_fingerprint() const;
  uint64_t instance_id() const { return instance_id_; }
  // Sets up the sender's cache tiers (SenderOptions::tiers). Before any handoff.
  Status EnableTiers() { return sender_.EnableTiers(weights_identity_); }

  struct Stats {
    int64_t committed = 0, failed = 0, aborted = 0;
    int64_t refused = 0;        // Destinations refused: queue full, no valid Hello
    int64_t peers_closed = 0;   // connections closed for silence, a refused Hello or an unconfirmed flush
    int64_t connections = 0;    // open now
    int64_t queued = 0;         // now
    int64_t pages_in_use = 0;   // of this engine's own pool, beyond the prefix cache; 0 when idle
    int64_t cached_pages = 0;   // held by the prefix cache
    int64_t cached_tokens = 0;  // prompt tokens not computed because they were cached
  };
  Stats stats() const;

 private:
  struct Peer {
    std::shared_ptr<transfer::Connection> connection;
    bool hello_ok = false;
    uint64_t decode_instance = 0;
    transfer::Clock::time_point last_heard;
  };
  struct Job {
    Destination destination;
    std::shared_ptr<transfer::Connection> connection;
    uint64_t decode_instance = 0;
    transfer::Clock::time_point deadline;
  };
  void Run();
  void RunHeartbeats();
  // REQUIRES mu_ held (these three).
  void OnHello(Peer& peer, const std::vector<uint8_t>& bytes);
  bool MayAnswerLocked(uint64_t decode_instance, uint64_t connection_id);
  void AnswerDeferredHellosLocked();
  void HandleLocked(Peer& peer, const std::shared_ptr<transfer::Connection>& connection, MessageType type,
                    const std::vector<uint8_t>& bytes);
  // REQUIRES mu_ held. Sends an Abort for a Destination not taken.
  void Refuse(transfer::Connection& c, uint64_t handoff_id, const std::string& why);
  // REQUIRES mu_ held. Ends a job after Run failed: acknowledge / report, or
  // close the connection when the writes are not fenced.
  void FinishFailed(const Job& job, const Status& status);
  // REQUIRES mu_ held. Closes and forgets a connection and ends its handoffs.
  void DropPeerLocked(uint64_t connection_id);

  const CacheSpec spec_;
  const PrefillOptions options_;
  const uint64_t instance_id_;
  const std::string weights_identity_;
  ThreadPool threads_;
  PagePool pool_;
  transfer::HandoffSender sender_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Peer> peers_;  // by connection id; guarded by mu_
  std::deque<Job> queue_;           // guarded by mu_
  uint64_t running_connection_ = 0, running_handoff_ = 0;  // guarded by mu_; 0: none
  uint64_t running_decode_instance_ = 0;                   // guarded by mu_
  // Hellos answered once the running handoff (of an earlier connection of the
  // same decode instance) has ended. Guarded by mu_.
  std::vector<std::pair<std::shared_ptr<transfer::Connection>, Hello>> deferred_hellos_;
  // Closed connections of each decode instance not yet released (puts of them
  // may still land). Guarded by mu_.
  std::map<uint64_t, std::vector<std::shared_ptr<transfer::Connection>>> closing_;
  bool stop_ = false;               // guarded by mu_
  Stats stats_;                     // guarded by mu_
  std::thread thread_, heartbeat_thread_;
};

}  // namespace tandem
