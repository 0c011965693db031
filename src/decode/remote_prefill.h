// The decode engine's link to a prefill engine over UCX: the handoff receiver
// plus the connection, the Hello handshake and a queue of what arrived. The
// decode engine's loop thread calls every method; transport threads only
// append to the inbox.
#pragma once

#include <deque>
#include <memory>
#include <mutex>

#include "model/cache_spec.h"
#include "transfer/handoff_receiver.h"
#include "transfer/ucx.h"

namespace tandem {

class RemotePrefill {
 public:
  // Allocates the decode pool's memory as a UCX region (peers write into it)
  // and connects to the prefill engine at `address` ("host:port").
  static StatusOr<std::unique_ptr<RemotePrefill>> Connect(const std::string& address, size_t pool_bytes,
                                                          std::string layout_fingerprint);
  ~RemotePrefill();

  uint8_t* arena() { return region_.data; }
  // Must be called once, before any other method, with the pool built on arena().
  void Attach(PagePool& pool, PrefixIndex* index, transfer::ReceiverOptions options);

  // Reserves pages and sends the Destination. ResourceExhausted: no pages yet.
  Status Start(uint64_t handoff_id, const std::vector<int32_t>& tokens, const SamplingParams& sampling);
  void Abort(uint64_t handoff_id, const std::string& reason);

  struct Outcome {
    uint64_t handoff_id = 0;
    Status status;                             // not OK: the handoff failed
    transfer::HandoffReceiver::Ready ready;    // when OK
  };
  // Handles everything that arrived; returns finished handoffs.
  std::vector<Outcome> Poll();

  // False after a failed handshake or a lost connection.
  bool healthy() const { return healthy_; }
  const std::string& problem() const { return problem_; }
  const transfer::ReceiverStats& stats() const { return receiver_->stats(); }

 private:
  RemotePrefill() = default;
  std::unique_ptr<transfer::UcxTransport> transport_;
  transfer::Region region_;
  std::shared_ptr<transfer::Connection> connection_;
  std::unique_ptr<transfer::HandoffReceiver> receiver_;
  std::string fingerprint_;
  bool healthy_ = true, greeted_ = false;
  std::string problem_;
  std::mutex mu_;
  std::deque<std::vector<uint8_t>> inbox_;  // guarded by mu_
  bool closed_ = false;                     // guarded by mu_
};

}  // namespace tandem
