// The decode server's links to its prefill engines: each one's handshake,
// heartbeats and silence detection, going down (ending what was in flight on
// it) and coming back by reconnecting with backoff.
#include "common/log.h"
#include "decode/prefill_links.h"
#include "transfer/handshake.h"

namespace tandem::decode {

using transfer::Clock;

// Opens a fresh connection (and handshake) for a link that is down.
void PrefillLinks::Reconnect(size_t i, Clock::time_point now) {
  Link& link = links_[i];
  transfer::ConnectionHandlers h;
  h.on_message = [this, i](transfer::Connection& c, std::vector<uint8_t> m) {
    // Counted before it is queued, on the reader thread: a put read after
    // it is tagged after it (decode/write_windows.h).
    transfer::WriteWindows* windows = windows_.load();
    const uint64_t number = windows != nullptr ? windows->MessageArrived(c.id()) : 0;
    {
      MutexLock lock(mu_);
      Arrival a;
      a.link = i;
      a.connection_id = c.id();
      a.message = number;
      a.bytes = std::move(m);
      inbox_.push_back(std::move(a));
    }
    arrived_.notify_all();
  };
  h.accept_put = [this](transfer::Connection& c, uint64_t offset, uint64_t bytes) {
    transfer::WriteWindows* windows = windows_.load();
    return windows != nullptr && windows->Allows(c.id(), offset, bytes);
  };
  h.on_close = [this, i](transfer::Connection& c, const Status& why) {
    {
      MutexLock lock(mu_);
      inbox_.push_back({i, c.id(), {}, true, why.code() == StatusCode::kDeadlineExceeded,
                        why.code() == StatusCode::kNotFound, why.code() == StatusCode::kAborted, why.message()});
    }
    arrived_.notify_all();
  };
  link.last_heard = now;
  auto conn = transport_->Connect(link.address, h);
  Hello hello = MyHello(0);
  hello.target = link.address;  // covered by the proof: only the engine there takes it
  link.prefill_nonce.clear();
  link.auth.reset();
  link.nonce = transfer::SignDecodeHello(options_.cluster_key, &hello);
  Status st = conn.ok() ? (*conn)->Send(hello.Encode()) : conn.status();
  if (!st.ok()) {
    if (conn.ok()) (*conn)->Close();
    link.state = LinkState::kDown;
    link.problem = st.message();
    link.retry_at = now + link.backoff;
    link.backoff = std::min(options_.reconnect_max, link.backoff * 2);
    return;
  }
  link.connection = std::move(conn).value();
  link.connection_id = link.connection->id();
  {
    MutexLock lock(mu_);
    beating_[i] = link.connection;
  }
  link.prefill_instance = 0;  // until its Hello
  link.state = LinkState::kConnecting;
  link.problem = "handshake in progress";
}

void PrefillLinks::LinkDown(size_t i, const std::string& why, bool peer_gone) {
  Link& link = links_[i];
  const auto now = Now();
  if (why != link.logged) {  // a peer that stays away is not logged at every retry
    TLOG_WARN("tandem decode: prefill engine %s unavailable: %s\n", link.address.c_str(), why.c_str());
    link.logged = why;
  }
  link.state = LinkState::kDown;
  link.problem = why;
  link.retry_at = now + link.backoff;
  link.backoff = std::min(options_.reconnect_max, link.backoff * 2);
  if (link.connection) {
    link.connection->Close();
    link.connection.reset();
    MutexLock lock(mu_);
    beating_.erase(i);
  }
  if (peer_gone || transport_->close_fences_peer_writes()) {
    receiver_->OnPeerClosed(link.connection_id, now);  // nothing of it can land any more
  } else if (link.connection_id != 0) {
    receiver_->OnPeerSuspended(link.connection_id, now);  // it may still write: wait for the fence
    link.suspended.push_back(link.connection_id);
  }
  link.connection_id = 0;
  for (auto it = handoff_link_.begin(); it != handoff_link_.end();) {
    if (it->second != i) {
      ++it;
      continue;
    }
    Outcome o;
    o.id = it->first;
    o.status = Unavailable("prefill engine " + link.address + " unavailable: " + why);
    o.retryable = true;
    failed_on_[it->first] = i;
    ended_.push_back(std::move(o));
    it = handoff_link_.erase(it);
  }
}

void PrefillLinks::OnHello(size_t i, const std::vector<uint8_t>& bytes) {
  Link& link = links_[i];
  auto hello = Hello::Decode(bytes);
  Status st = hello.ok() ? transfer::CheckHello(MyHello(hello->instance_id), *hello, options_.allow_mixed_numerics) : hello.status();
  if (st.ok() && hello->peer_instance_id != instance_id_) {
    st = FailedPrecondition("the prefill engine answered another decode instance (" +
                            std::to_string(hello->peer_instance_id) + ")");
  }
  if (st.ok()) st = transfer::CheckPrefillHello(options_.cluster_key, link.nonce, *hello);
  if (!st.ok()) {
    TLOG_WARN("tandem decode: refusing the prefill engine %s: %s\n", link.address.c_str(),
                 st.message().c_str());
    link.backoff = options_.reconnect_max;  // it will not change by itself soon
    LinkDown(i, st.message());
    return;
  }
  if (link.known_instance != 0 && link.known_instance != hello->instance_id) {
    affinity_.ForgetTarget(int(i));  // a restarted engine: its prefix cache is empty
  }
  link.known_instance = link.prefill_instance = hello->instance_id;
  link.prefill_nonce = hello->nonce;
  // From here on every message is sealed, both ways (transfer/message_auth.h).
  link.auth = std::make_shared<transfer::MessageAuth>(options_.cluster_key, link.nonce, hello->nonce,
                                                      /*decode_side=*/true);
  link.connection = transfer::SealedConnection(link.connection, link.auth);
  {
    MutexLock lock(mu_);
    if (beating_.count(i)) beating_[i] = link.connection;
  }
  // Its answer promises that no handoff of an earlier connection of ours still
  // writes (a restarted engine cannot): the pages those held are free now.
  for (uint64_t old : link.suspended) receiver_->OnPeerClosed(old, Now());
  link.suspended.clear();
  if (link.probation && hello->instance_id != link.silent_instance) link.probation = false;  // a restarted engine
  if (link.probation) {
    link.probation_until = Now() + 2 * options_.peer_timeout;
    link.problem = "on probation after being declared dead: must stay live for " +
                   std::to_string(2 * options_.peer_timeout.count()) + " ms";
    return;  // KeepAlive brings it up
  }
  LinkUp(i);
}

void PrefillLinks::LinkUp(size_t i) {
  Link& link = links_[i];
  TLOG_INFO("tandem decode: prefill engine %s (instance %llu) is up\n", link.address.c_str(),
               (unsigned long long)link.prefill_instance);
  link.state = LinkState::kUp;
  link.probation = false;
  link.problem.clear();
  link.logged.clear();  // the next failure is news again
  link.backoff = options_.reconnect_min;
}

// Heartbeats out, silence detection, reconnects, and the quarantine deadline.
void PrefillLinks::KeepAlive(Clock::time_point now) {
  for (size_t i = 0; i < links_.size(); ++i) {
    Link& link = links_[i];
    if (!link.listed && link.state != LinkState::kDown &&
        std::none_of(handoff_link_.begin(), handoff_link_.end(), [&](const auto& h) { return h.second == i; })) {
      // Unlisted, and nothing of ours is on it any more (no open handoff, no
      // abort waiting for its acknowledgement): close it.
      const auto quarantined = receiver_->PeersQuarantinedSince(now + std::chrono::hours(1));
      if (std::find(quarantined.begin(), quarantined.end(), link.connection_id) == quarantined.end()) {
        // No write of this connection can still land in our pages (its
        // handoffs committed after a flush or were acknowledged after one):
        // as good as a fence.
        LinkDown(i, "no longer registered in discovery", /*peer_gone=*/true);
      }
    }
    if (link.state == LinkState::kDown) {
      // An unlisted link is dialed again only while pages wait for its fence
      // (a connection closed while the peer may still write, transport
      // without a closing fence): the next handshake, or a refusal, ends it.
      if ((link.listed || !link.suspended.empty()) && now >= link.retry_at) {
        ++reconnects_;
        Reconnect(i, now);
      }
      continue;
    }
    if (now - link.last_heard > options_.peer_timeout) {
      ++peers_declared_dead_;
      link.probation = true;
      link.silent_instance = link.prefill_instance;
      LinkDown(i, "silent for " + std::to_string(Ms(now - link.last_heard)) + " ms (peer timeout " +
                      std::to_string(options_.peer_timeout.count()) + " ms): declared dead, connection closed");
      continue;
    }
    if (link.state == LinkState::kConnecting && link.probation && link.prefill_instance != 0 &&
        now >= link.probation_until) {
      LinkUp(i);
    }
  }
  // An abort nobody acknowledges: closing the link is the fence that ends it.
  // The ack follows the peer's flush, which follows its current engine step
  // and the writes queued ahead of it, so a live, loaded peer (its heartbeats
  // arrive) gets kAckWaitPeerTimeouts peer timeouts: a quarantine holds only
  // pages, while closing fails every handoff on the link. A silent peer is
  // closed by the liveness check above, after one.
  for (uint64_t conn : receiver_->PeersQuarantinedSince(now - kAckWaitPeerTimeouts * options_.peer_timeout)) {
    for (size_t i = 0; i < links_.size(); ++i) {
      if (links_[i].connection && links_[i].connection_id == conn) {
        LinkDown(i, "an aborted handoff was not acknowledged within " +
                        std::to_string(kAckWaitPeerTimeouts * options_.peer_timeout.count()) +
                        " ms: connection closed to release its pages");
      }
    }
  }
}

}  // namespace tandem::decode
