// The decode engine's links to its prefill engines over UCX: one transport,
// one region (the decode pool) that every prefill engine writes into, one
// connection per prefill engine with its own Hello check and health, the
// handoff receiver, and a queue of what arrived. Handoffs go round-robin to
// healthy links. The decode engine's loop thread calls every method;
// transport threads only append to the inbox.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "model/cache_spec.h"
#include "transfer/handoff_receiver.h"
#include "transfer/ucx.h"

namespace tandem {

class RemotePrefill {
 public:
  // Allocates the decode pool's memory as a UCX region and connects to every
  // prefill engine in `addresses` ("host:port" each).
  static StatusOr<std::unique_ptr<RemotePrefill>> Connect(const std::vector<std::string>& addresses,
                                                          size_t pool_bytes, std::string layout_fingerprint);
  ~RemotePrefill();

  uint8_t* arena() { return region_.data; }
  // Must be called once, before any other method, with the pool built on arena().
  void Attach(PagePool& pool, PrefixIndex* index, transfer::ReceiverOptions options);
  void SetTiers(TieredCache* tiers) { receiver_->SetTiers(tiers); }

  // Reserves pages and sends the Destination to the next healthy prefill
  // engine. ResourceExhausted: no pages yet; Unavailable: no healthy link.
  Status Start(uint64_t handoff_id, const std::vector<int32_t>& tokens, const SamplingParams& sampling);
  void Abort(uint64_t handoff_id, const std::string& reason);

  struct Outcome {
    uint64_t handoff_id = 0;
    Status status;                             // not OK: the handoff failed
    transfer::HandoffReceiver::Ready ready;    // when OK
  };
  // Handles everything that arrived; returns finished (committed or failed) handoffs.
  std::vector<Outcome> Poll();

  // True while at least one prefill engine is usable.
  bool healthy() const;
  std::string problem() const;
  const transfer::ReceiverStats& stats() const { return receiver_->stats(); }
  // Handoffs begun and not yet committed, failed or acknowledged as aborted.
  size_t open_handoffs() const { return receiver_->open_handoffs(); }

 private:
  struct Link {
    std::string address;
    std::shared_ptr<transfer::Connection> connection;
    bool healthy = true;
    std::string problem;
  };
  struct Arrival {
    size_t link;
    std::vector<uint8_t> bytes;  // empty with closed == true: the connection went away
    bool closed = false;
  };
  RemotePrefill() = default;
  // Marks a link dead; its open handoffs fail (reported by the next Poll).
  void LinkDown(size_t link, const std::string& why);

  std::unique_ptr<transfer::UcxTransport> transport_;
  transfer::Region region_;
  std::vector<Link> links_;
  std::unique_ptr<transfer::HandoffReceiver> receiver_;
  std::map<uint64_t, size_t> handoff_link_;  // open handoffs -> the link serving them
  std::vector<Outcome> failed_;              // handoffs of dead links, not yet reported
  std::string fingerprint_;
  size_t next_link_ = 0;
  std::mutex mu_;
  std::deque<Arrival> inbox_;  // guarded by mu_
};

}  // namespace tandem
