// Private to the UCX transport (ucx.cc): the transport's shared state and one
// connection over UCX. Not part of the transfer interface; include ucx.h.
#pragma once

#include "common/env.h"
#include "transfer/ucx.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "transfer/refusal_counter.h"
#include "transfer/ucx_detail.h"

namespace tandem::transfer {

using namespace ucx_detail;

class UcxConnection;

struct UcxTransport::Impl {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_listener_h listener = nullptr;
  std::atomic<bool> stop{false};
  std::atomic<bool> closing{false};  // the transport is being destroyed: connection requests are rejected
  std::thread progress, delivery;
  std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept;
  Mutex mu;
  std::condition_variable cv;
  std::map<ucp_ep_h, std::shared_ptr<UcxConnection>> connections GUARDED_BY(mu);
  struct Event {
    std::shared_ptr<UcxConnection> conn;
    std::vector<uint8_t> message;
    bool close = false;
    Status status;
    bool peer_address = false;  // message holds the peer's worker address
    bool accepted = false;      // a connection a peer made: run on_accept (never inside progress)
    static Event Message(std::shared_ptr<UcxConnection> c, std::vector<uint8_t> m) {
      Event e;
      e.conn = std::move(c);
      e.message = std::move(m);
      return e;
    }
  };
  std::deque<Event> events GUARDED_BY(mu);
  std::vector<ucp_mem_h> mems GUARDED_BY(mu);
  uint64_t next_id GUARDED_BY(mu) = 1;
  std::vector<uint8_t> worker_address;
  uint64_t knock = 0;  // UcxTransport::Create's; read only

  // The listener's gate (SetFirstMessageGate; set before Listen, then read
  // only): an accepted connection is pending — no on_accept, no handlers, no
  // endpoint made from an address it sent, messages of at most max_bytes and
  // at most kMaxEarlyMessages of them — until the delivery thread admits it
  // on its first message, or refuses it (that message refused, the deadline
  // passed, or the longest waiting when another arrives while max_pending wait).
  std::optional<FirstMessageGate> gate;
  std::map<uint64_t, std::shared_ptr<UcxConnection>> pending GUARDED_BY(mu);  // by id
  RefusalCounter refusals{"ucx"};
  static constexpr int kMaxEarlyMessages = 4;
  static constexpr size_t kMaxFlushingRefusals = 16;  // queued closes past which a refusal's reply is not waited for
  static constexpr std::chrono::milliseconds kRefusalFlush{200};
  // Any thread: closes `c`, after sending `reply` when there is one.
  void Refuse(const std::shared_ptr<UcxConnection>& c, const std::string& why, std::vector<uint8_t> reply = {});
  // Delivery thread: a pending connection's first message.
  void Admit(Event& e);
  // Delivery thread, mu held: the pending connections past their deadline, taken out.
  std::vector<std::shared_ptr<UcxConnection>> TakeLatePendingLocked(Clock::time_point now) REQUIRES(mu);

  void Post(Event e) EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      events.push_back(std::move(e));
    }
    cv.notify_all();
  }
  void RunProgress();
  void RunDelivery();
  void Forget(ucp_ep_h ep) {
    MutexLock lock(mu);
    connections.erase(ep);
  }
  // Closed connections: released by the closer thread, then kept until the
  // transport goes (UCX may still name them in a late error callback).
  Mutex closer_mu;
  std::condition_variable closer_cv;
  std::deque<std::pair<std::shared_ptr<UcxConnection>, bool>> to_close GUARDED_BY(closer_mu);
  std::vector<std::shared_ptr<UcxConnection>> closed GUARDED_BY(closer_mu);
  bool closer_stop GUARDED_BY(closer_mu) = false;
  std::thread closer;
  void CloseLater(std::shared_ptr<UcxConnection> c, bool force);
  void RunCloser();
  std::shared_ptr<UcxConnection> Find(ucp_ep_h ep) {
    MutexLock lock(mu);
    auto it = connections.find(ep);
    return it == connections.end() ? nullptr : it->second;
  }
};

class UcxConnection : public Connection, public std::enable_shared_from_this<UcxConnection> {
 public:
  UcxConnection(UcxTransport::Impl* t, uint64_t id) : t_(t), id_(id) {}
  ~UcxConnection() override { Release(!alive_); }

  uint64_t id() const override { return id_; }
  bool alive() const override { return alive_.load(); }

  // PutMany, Flush and SendAm hold ops_mu_ shared while they use the endpoints;
  // Close takes it exclusively, so the endpoints and rkeys are released only
  // once no operation uses them (closing_ makes waiting operations give up).
  Status Put(const void* src, size_t bytes, const RemoteKey& key, uint64_t offset) override {
    const PutOp op{src, bytes, offset};
    return PutMany(std::span<const PutOp>(&op, 1), key);
  }

  // One lock, one endpoint and key lookup for the whole batch: into a region
  // mapped here the batch is a run of copies with no atomic between them.
  Status PutMany(std::span<const PutOp> ops, const RemoteKey& key) override {
    if (ops.empty()) return Status::Ok();
    std::shared_lock<std::shared_mutex> lock(ops_mu_);
    if (!alive_ || closing_) return Unavailable("UCX connection " + std::to_string(id_) + " is closed");
    if (key.blob.size() <= kKeyHeaderBytes) return InvalidArgument("UCX remote key is too short");
    KeyHeader header;
    std::memcpy(&header, key.blob.data(), kKeyHeaderBytes);
    // The region's own size bounds every put, whatever size the caller's key
    // claims (a peer's destination must not aim our copies past its region).
    const uint64_t size = std::min(key.size, header.bytes);
    for (const PutOp& op : ops) {
      if (op.offset > size || op.bytes > size - op.offset) {
        return OutOfRange("put of " + std::to_string(op.bytes) + " bytes at offset " + std::to_string(op.offset) +
                          " exceeds the " + std::to_string(size) + "-byte remote region");
      }
    }
    TANDEM_ASSIGN_OR_RETURN(ucp_ep_h data_ep, DataEndpoint());
    TANDEM_ASSIGN_OR_RETURN(const RemoteKeyEntry entry, RemoteKeyFor(key, header));
    for (const PutOp& op : ops) {
      if (entry.local != nullptr) {
        std::memcpy(entry.local + op.offset, op.src, op.bytes);
        continue;
      }
      ucp_request_param_t p{};
      ucs_status_ptr_t r = ucp_put_nbx(data_ep, op.src, op.bytes, header.base + op.offset, entry.rkey, &p);
      if (UCS_PTR_IS_ERR(r)) return UcxError("ucp_put_nbx", UCS_PTR_STATUS(r));
      if (r != nullptr) ucp_request_free(r);  // completes in the background; Flush covers it
    }
    return Status::Ok();
  }

  Status Flush(Clock::time_point deadline) override {
    std::shared_lock<std::shared_mutex> ops(ops_mu_);
    if (!alive_ || closing_) return Unavailable("UCX connection " + std::to_string(id_) + " is closed");
    ucp_ep_h data_ep = nullptr;
    {
      MutexLock lock(mu_);
      data_ep = data_ep_;
    }
    if (!data_ep) return Status::Ok();  // no put was ever posted
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_ep_flush_nbx(data_ep, &p);
    return Wait(r, deadline, "ucp_ep_flush_nbx");
  }

  Status Send(std::vector<uint8_t> message) override { return SendAm(kAmId, std::move(message)); }

  Status SendAm(unsigned am_id, std::vector<uint8_t> message) {
    std::shared_lock<std::shared_mutex> ops(ops_mu_);
    if (!alive_ || closing_) return Unavailable("UCX connection " + std::to_string(id_) + " is closed");
    auto owned = std::make_unique<std::vector<uint8_t>>(std::move(message));
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep_, am_id, nullptr, 0, owned->data(), owned->size(), &p);
    if (r == nullptr) return Status::Ok();
    if (UCS_PTR_IS_ERR(r)) return UcxError("ucp_am_send_nbx", UCS_PTR_STATUS(r));
    // The buffer must outlive the send: keep both until the request completes.
    MutexLock lock(mu_);
    ReapSendsLocked();
    pending_sends_.emplace_back(r, std::move(owned));
    return Status::Ok();
  }

  // Also after the peer died. Returns at once: no new operation starts, the
  // ones in progress give up, and the transport's closer thread releases the
  // endpoints (a flushing close can take seconds; nobody waits for it).
  void Close() override { CloseWith(/*force=*/false); }
  // force: release the endpoints without flushing them to the peer;
  // otherwise the flush may take up to `flush_limit`, then it is cancelled.
  void CloseWith(bool force, std::chrono::milliseconds flush_limit = std::chrono::seconds(2)) {
    if (closed_.exchange(true)) return;
    flush_limit_ms_ = flush_limit.count();
    closing_ = true;
    const bool was_alive = alive_.exchange(false);
    {
      MutexLock lock(mu_);
      data_cv_.notify_all();  // a Put waiting for the data endpoint gives up
    }
    t_->Forget(ep_);
    t_->CloseLater(shared_from_this(), /*force=*/force || !was_alive);
    if (was_alive) t_->Post({shared_from_this(), {}, true, Status(StatusCode::kAborted, "connection closed by this side")});
  }

  // The closer thread: waits for operations in progress (they give up on
  // closing_), then releases the endpoints — a flushing close completes the
  // puts still pending, a forced one cancels them; either way none lands later.
  void ReleaseNow(bool force) {
    std::unique_lock<std::shared_mutex> ops(ops_mu_);
    Release(force);
  }
  void MarkReleased() { released_ = true; }
  bool WaitReleased(Clock::time_point deadline) override {
    UniqueLock lock(t_->closer_mu);
    return t_->closer_cv.wait_until(lock.native(), deadline, [&] { return released_.load(); });
  }

  // The peer is gone (error callback): writes can no longer land.
  // A timeout says the peer did not answer, not that it is gone (a stalled
  // process may resume): DeadlineExceeded then, Unavailable otherwise.
  void Died(ucs_status_t st) {
    if (!alive_.exchange(false)) return;
    const bool timeout = st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_TIMED_OUT;
    // Never connected (nothing listens there) is NotFound.
    const bool refused = st == UCS_ERR_NOT_CONNECTED || st == UCS_ERR_UNREACHABLE || st == UCS_ERR_REJECTED;
    // Rejected: most often for its knock (UcxTransport::Create), also by a
    // listener that is shutting down.
    const std::string knock = st == UCS_ERR_REJECTED ? " (a listener with a cluster key takes only connection "
                                                       "requests that carry its knock: this may mean "
                                                       "--cluster-key-file differs between the two sides, or "
                                                       "that the peer is a tandem older than the knock)"
                                                     : "";
    Status why = timeout ? Status(StatusCode::kDeadlineExceeded, std::string("peer timed out: ") + ucs_status_string(st))
                 : refused ? Status(StatusCode::kNotFound, std::string("could not connect: ") + ucs_status_string(st) + knock)
                           : UcxError("peer connection failed", st);
    t_->Post({shared_from_this(), {}, true, std::move(why)});
  }

  // Delivery thread: the peer's worker address arrived (the first one
  // counts). An accepted connection makes its data endpoint from it once the
  // listener's gate has admitted it (at once without a gate): while the peer
  // is surely there, and never for a peer that did not authenticate. A
  // connection we made does so at its first put (a decode server never puts).
  void SetPeerAddress(std::vector<uint8_t> address) {
    {
      MutexLock lock(mu_);
      if (!peer_address_.empty() || !alive_) return;
      peer_address_ = std::move(address);
      data_cv_.notify_all();
    }
    if (accepted_ && !gated_) MakeDataEndpoint();
  }
  // Delivery thread: admitted by the gate.
  void Admitted() {
    gated_ = false;
    MakeDataEndpoint();
  }

  ucp_ep_h ep_ = nullptr;
  ConnectionHandlers handlers_;  // delivery thread
  // The listener's gate holds it (UcxTransport::Impl::gate).
  std::atomic<bool> gated_{false};
  bool accepted_ = false;  // a peer made it (set before it is shared)
  std::atomic<bool> refused_{false};  // the gate refused it (once: the first refusal counts)
  Clock::time_point gate_deadline_;  // set before it is pending, then read only
  std::atomic<int> early_messages_{0};  // messages seen while gated

 private:
  // Makes the data endpoint from the peer's address, once (a failure is
  // kept: UCX leaks a little on every failed attempt).
  void MakeDataEndpoint() {
    MutexLock lock(mu_);
    MakeDataEndpointLocked();
  }
  void MakeDataEndpointLocked() REQUIRES(mu_) {
    if (data_ep_ || !data_status_.ok() || peer_address_.empty() || !alive_) return;
    // No peer error-handling mode here: UCX 1.13 drops the shared-memory
    // transports from endpoints that ask for it. Peer failure is detected on
    // the sockaddr endpoint, and every Flush has a deadline.
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer_address_.data());
    if (ucp_ep_create(t_->worker, &ep, &data_ep_) != UCS_OK) {
      data_ep_ = nullptr;
      data_status_ = Unavailable("cannot create the data endpoint to the peer's worker");
    }
    data_cv_.notify_all();
  }

  // The endpoint puts travel on (waiting briefly for the peer's address at
  // connection start; made here at the first put on a connection we made).
  StatusOr<ucp_ep_h> DataEndpoint() {
    UniqueLock lock(mu_);
    if (!data_cv_.wait_for(lock.native(), std::chrono::seconds(10),
                           [&]() REQUIRES(mu_) { return data_ep_ || !peer_address_.empty() || !alive_; })) {
      return Unavailable("the peer never sent its worker address");
    }
    if (!alive_) return Unavailable("UCX connection " + std::to_string(id_) + " is closed");
    MakeDataEndpointLocked();
    if (!data_ep_) return data_status_;
    return data_ep_;
  }

  Status Wait(ucs_status_ptr_t r, Clock::time_point deadline, const char* what) {
    if (r == nullptr) return Status::Ok();
    if (UCS_PTR_IS_ERR(r)) return UcxError(what, UCS_PTR_STATUS(r));
    ucs_status_t st;
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
      ucp_worker_progress(t_->worker);
      if (closing_) {
        ucp_request_free(r);  // released by UCX when it completes
        return Unavailable(std::string(what) + ": the connection was closed");
      }
      if (Env::Default().Now() >= deadline) {
        ucp_request_free(r);
        return Status(StatusCode::kDeadlineExceeded, std::string(what) + " did not complete before its deadline");
      }
    }
    ucp_request_free(r);
    return st == UCS_OK ? Status::Ok() : UcxError(what, st);
  }

  // An unpacked remote key, and where its region is mapped in this process
  // when UCX shares it through shared memory (ucp_rkey_ptr), else null.
  struct RemoteKeyEntry {
    ucp_rkey_h rkey = nullptr;
    uint8_t* local = nullptr;
  };

  StatusOr<RemoteKeyEntry> RemoteKeyFor(const RemoteKey& key, const KeyHeader& header) {
    MutexLock lock(mu_);
    if (!rkeys_.empty() && last_rkey_->first == key.blob) return last_rkey_->second;
    auto it = rkeys_.find(key.blob);
    if (it != rkeys_.end()) {
      last_rkey_ = it;
      return it->second;
    }
    std::optional<SegmentPin> pin;  // see KeyHeader: never let UCX unpack a dead segment
    if (header.shmid >= 0 && header.ipc_identity == IpcIdentity()) {
      TANDEM_ASSIGN_OR_RETURN(SegmentPin p, SegmentPin::Attach(header.shmid));
      pin.emplace(std::move(p));
    }
    ucp_rkey_h rkey = nullptr;
    const ucs_status_t st = ucp_ep_rkey_unpack(data_ep_, key.blob.data() + kKeyHeaderBytes, &rkey);
    if (st != UCS_OK) return UcxError("ucp_ep_rkey_unpack", st);
    // Puts of a few KiB through UCX cost a system call each (CMA); a region
    // UCX can map here is written with a plain copy instead.
    RemoteKeyEntry entry{rkey, nullptr};
    void* local = nullptr;
    if (ucp_rkey_ptr(rkey, header.base, &local) == UCS_OK) entry.local = static_cast<uint8_t*>(local);
    last_rkey_ = rkeys_.emplace(key.blob, entry).first;
    return entry;
  }

  // force: the peer is gone, so do not try to flush to it (a flush to a dead
  // TCP peer only times out, and UCX logs an error for it).
  void CloseEndpoint(ucp_ep_h ep, bool force) {
    const auto limit = std::chrono::milliseconds(flush_limit_ms_.load());
    ucp_request_param_t p{};
    if (force) {
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
    const auto until = Env::Default().Now() + limit;
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Env::Default().Now() < until) ucp_worker_progress(t_->worker);
    if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(t_->worker, r);
    ucp_request_free(r);
  }

  void ReapSendsLocked() REQUIRES(mu_) {
    std::erase_if(pending_sends_, [](auto& s) {
      if (ucp_request_check_status(s.first) == UCS_INPROGRESS) return false;
      ucp_request_free(s.first);
      return true;
    });
  }

  // Closes the endpoints: flushing them when the peer is alive, so no put of
  // ours can land afterwards; forcing them when the peer is gone.
  void Release(bool force) {
    MutexLock lock(mu_);
    for (auto& [blob, entry] : rkeys_) ucp_rkey_destroy(entry.rkey);
    rkeys_.clear();
    data_cv_.notify_all();
    if (data_ep_) {
      CloseEndpoint(data_ep_, force);
      data_ep_ = nullptr;
    }
    if (!ep_) return;
    CloseEndpoint(ep_, force);
    ep_ = nullptr;
    // The endpoint is gone: every send has completed or been cancelled.
    for (auto& [req, buf] : pending_sends_) {
      if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(t_->worker, req);
      ucp_request_free(req);
    }
    pending_sends_.clear();
  }

  UcxTransport::Impl* t_;
  const uint64_t id_;
  std::atomic<bool> alive_{true};
  std::atomic<bool> closed_{false};
  std::atomic<bool> closing_{false};
  std::atomic<bool> released_{false};  // set under t_->closer_mu
  std::atomic<int64_t> flush_limit_ms_{2000};
  // Held shared by every operation that uses the endpoints, exclusively by
  // their release (not a checked capability: it guards the endpoints'
  // lifetime, not fields).
  std::shared_mutex ops_mu_;
  Mutex mu_;
  std::map<std::vector<uint8_t>, RemoteKeyEntry> rkeys_ GUARDED_BY(mu_);
  // Valid while rkeys_ is not empty.
  std::map<std::vector<uint8_t>, RemoteKeyEntry>::iterator last_rkey_ GUARDED_BY(mu_);
  std::vector<std::pair<void*, std::unique_ptr<std::vector<uint8_t>>>> pending_sends_ GUARDED_BY(mu_);
  ucp_ep_h data_ep_ GUARDED_BY(mu_) = nullptr;
  Status data_status_ GUARDED_BY(mu_);                 // why it could not be made
  std::vector<uint8_t> peer_address_ GUARDED_BY(mu_);
  std::condition_variable data_cv_;
};

}  // namespace tandem::transfer
