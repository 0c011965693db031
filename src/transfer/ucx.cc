#include "transfer/ucx.h"

#include "common/env.h"
#include "transfer/address.h"
#include "transfer/ucx_internal.h"

namespace tandem::transfer {

void UcxTransport::Impl::CloseLater(std::shared_ptr<UcxConnection> c, bool force) {
  {
    MutexLock lock(closer_mu);
    to_close.emplace_back(std::move(c), force);
  }
  closer_cv.notify_all();
}

void UcxTransport::Impl::RunCloser() {
  UniqueLock lock(closer_mu);
  for (;;) {
    closer_cv.wait(lock.native(), [&]() REQUIRES(closer_mu) { return closer_stop || !to_close.empty(); });
    if (to_close.empty()) return;  // stopping, and nothing left to release
    auto [c, force] = std::move(to_close.front());
    to_close.pop_front();
    lock.Unlock();
    c->ReleaseNow(force);
    lock.Lock();
    c->MarkReleased();
    closer_cv.notify_all();
    closed.push_back(std::move(c));
    if (closed.size() > 4096) closed.erase(closed.begin(), closed.begin() + 1024);  // long released
  }
}

void UcxTransport::Impl::RunProgress() {
  while (!stop) {
    if (ucp_worker_progress(worker) != 0) continue;
    if (ucp_worker_arm(worker) == UCS_OK) ucp_worker_wait(worker);
  }
}

void UcxTransport::Impl::Refuse(const std::shared_ptr<UcxConnection>& c, const std::string& why,
                                std::vector<uint8_t> reply) {
  if (c->refused_.exchange(true)) return;  // refused already (a sweep and a screen may race)
  {
    // Its queued messages go too: what it sent is not kept past its refusal.
    MutexLock lock(mu);
    pending.erase(c->id());
    std::erase_if(events, [&](const Event& e) { return e.conn == c && !e.close; });
  }
  // With a reply, a short flushing close delivers it (a peer refused for its
  // layout or weights learns why) while the closer has little queued; past
  // that, and without one, a forced close: nothing of ours is in flight.
  // Either way the closer spends at most kRefusalFlush on it.
  bool flush = false;
  if (!reply.empty() && c->SendAm(kAmId, std::move(reply)).ok()) {
    MutexLock lock(closer_mu);
    flush = to_close.size() < kMaxFlushingRefusals;
  }
  c->CloseWith(/*force=*/!flush, kRefusalFlush);
  refusals.Count(why);
}

std::vector<std::shared_ptr<UcxConnection>> UcxTransport::Impl::TakeLatePendingLocked(Clock::time_point now) {
  std::vector<std::shared_ptr<UcxConnection>> late;
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second->gate_deadline_ > now) {
      ++it;
      continue;
    }
    late.push_back(std::move(it->second));
    it = pending.erase(it);
  }
  return late;
}

void UcxTransport::Impl::Admit(Event& e) {
  {
    MutexLock lock(mu);
    if (pending.erase(e.conn->id()) == 0) return;  // refused meanwhile: its messages go nowhere
  }
  if (!e.conn->alive()) return;
  std::vector<uint8_t> reply;
  if (gate->check) {
    if (Status st = gate->check(e.message, &reply); !st.ok()) {
      Refuse(e.conn, "its first message was refused: " + st.message(), std::move(reply));
      return;
    }
  }
  if (e.conn->refused_) return;
  e.conn->Admitted();
  e.conn->handlers_ = on_accept(e.conn);
  (void)e.conn->SendAm(kAddressAmId, worker_address);
  if (e.conn->handlers_.on_message) e.conn->handlers_.on_message(*e.conn, std::move(e.message));
}

void UcxTransport::Impl::RunDelivery() {
  UniqueLock lock(mu);
  for (;;) {
    const auto ready = [&]() REQUIRES(mu) { return stop || !events.empty(); };
    if (pending.empty()) {
      cv.wait(lock.native(), ready);
    } else {
      Clock::time_point first = Clock::time_point::max();
      for (const auto& [id, c] : pending) first = std::min(first, c->gate_deadline_);
      cv.wait_until(lock.native(), first, ready);
    }
    if (auto late = TakeLatePendingLocked(Env::Default().Now()); !late.empty()) {
      lock.Unlock();
      for (auto& c : late) Refuse(c, "no first message within " + std::to_string(gate->deadline.count()) + " ms");
      lock.Lock();
      continue;
    }
    if (events.empty()) {
      if (stop) return;
      continue;
    }
    Event e = std::move(events.front());
    events.pop_front();
    lock.Unlock();
    if (e.conn->gated_ && !e.accepted && !e.peer_address && !e.close) {
      Admit(e);
    } else if (e.accepted) {
      e.conn->handlers_ = on_accept(e.conn);
      (void)e.conn->SendAm(kAddressAmId, worker_address);
    } else if (e.peer_address) {
      e.conn->SetPeerAddress(e.message);
    } else if (e.close) {
      if (e.conn->handlers_.on_close) e.conn->handlers_.on_close(*e.conn, e.status);
    } else if (e.conn->handlers_.on_message) {
      e.conn->handlers_.on_message(*e.conn, std::move(e.message));
    }
    lock.Lock();
  }
}

namespace {

// By endpoint, not by a pointer to the connection: UCX may report an error
// for an endpoint whose connection this side has long closed and dropped.
void OnError(void* arg, ucp_ep_h ep, ucs_status_t st) {
  if (auto conn = static_cast<UcxTransport::Impl*>(arg)->Find(ep)) conn->Died(st);
}

// A pending connection (the listener's gate holds it) may send only small
// messages, and few: what it declares past that is refused before a byte is
// kept. Returns the status the AM callback gives back when it is refused.
std::optional<ucs_status_t> Screen(UcxTransport::Impl* t, const std::shared_ptr<UcxConnection>& conn, size_t length,
                                   const ucp_am_recv_param_t* param) {
  if (!conn->gated_) return std::nullopt;
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  if (rndv || length > t->gate->max_bytes) {
    t->Refuse(conn, "its first message declares " + std::to_string(length) +
                        " bytes (the limit before authentication is " + std::to_string(t->gate->max_bytes) + ")");
    return rndv ? UCS_ERR_REJECTED : UCS_OK;  // a rendezvous is dropped, its data never fetched
  }
  if (++conn->early_messages_ > UcxTransport::Impl::kMaxEarlyMessages) {
    t->Refuse(conn, "more than " + std::to_string(UcxTransport::Impl::kMaxEarlyMessages) +
                        " messages before its first was admitted");
    return UCS_OK;
  }
  return std::nullopt;
}

ucs_status_t OnAddress(void* arg, const void*, size_t, void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport::Impl*>(arg);
  auto conn = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? t->Find(param->reply_ep) : nullptr;
  if (!conn) return UCS_OK;
  if (auto refused = Screen(t, conn, length, param)) return *refused;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) return UCS_OK;  // addresses are small
  const uint8_t* p = static_cast<const uint8_t*>(data);
  auto e = UcxTransport::Impl::Event::Message(conn, std::vector<uint8_t>(p, p + length));
  e.peer_address = true;
  t->Post(std::move(e));
  return UCS_OK;
}

ucs_status_t OnMessage(void* arg, const void*, size_t, void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport::Impl*>(arg);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) return UCS_OK;
  auto conn = t->Find(param->reply_ep);
  if (!conn) return UCS_OK;
  if (auto refused = Screen(t, conn, length, param)) return *refused;
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    t->Post(UcxTransport::Impl::Event::Message(conn, std::vector<uint8_t>(p, p + length)));
    return UCS_OK;
  }
  // Large message: fetch it, then deliver.
  struct Pending {
    UcxTransport::Impl* t;
    std::shared_ptr<UcxConnection> conn;
    std::vector<uint8_t> buf;
  };
  auto* pending = new Pending{t, conn, std::vector<uint8_t>(length)};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = [](void* req, ucs_status_t st, size_t, void* user) {
    auto* pd = static_cast<Pending*>(user);
    if (st == UCS_OK) pd->t->Post(UcxTransport::Impl::Event::Message(pd->conn, std::move(pd->buf)));
    delete pd;
    if (req) ucp_request_free(req);
  };
  p.user_data = pending;
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(t->worker, data, pending->buf.data(), length, &p);
  if (r == nullptr) {
    t->Post(UcxTransport::Impl::Event::Message(conn, std::move(pending->buf)));
    delete pending;
  } else if (UCS_PTR_IS_ERR(r)) {
    delete pending;
  }
  return UCS_OK;
}

}  // namespace

StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(bool shm_only, uint64_t knock) {
  auto impl = std::make_unique<Impl>();
  impl->knock = knock;
  // A prefill engine restarted on its port must be able to listen there at
  // once, even while connections of its previous life sit in TIME_WAIT.
  setenv("UCX_CM_REUSEADDR", "y", /*overwrite=*/0);
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return UcxError("ucp_config_read", st);
  if (shm_only) {
    // Sockaddr connection setup always needs tcp.
    st = ucp_config_modify(config, "TLS", "sm,tcp");
    if (st != UCS_OK) {
      ucp_config_release(config);
      return UcxError("ucp_config_modify TLS=sm,tcp for --transport shm", st);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  st = ucp_init(&params, config, &impl->context);
  ucp_config_release(config);
  if (st != UCS_OK) return UcxError("ucp_init", st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  if (knock != 0) {
    wp.field_mask |= UCP_WORKER_PARAM_FIELD_CLIENT_ID;
    wp.client_id = knock;
  }
  st = ucp_worker_create(impl->context, &wp, &impl->worker);
  if (st != UCS_OK) {
    ucp_cleanup(impl->context);
    return UcxError("ucp_worker_create", st);
  }
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAmId;
  hp.cb = &OnMessage;
  hp.arg = impl.get();
  st = ucp_worker_set_am_recv_handler(impl->worker, &hp);
  if (st != UCS_OK) return UcxError("ucp_worker_set_am_recv_handler", st);
  hp.id = kAddressAmId;
  hp.cb = &OnAddress;
  st = ucp_worker_set_am_recv_handler(impl->worker, &hp);
  if (st != UCS_OK) return UcxError("ucp_worker_set_am_recv_handler", st);
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  st = ucp_worker_get_address(impl->worker, &address, &address_length);
  if (st != UCS_OK) return UcxError("ucp_worker_get_address", st);
  const uint8_t* a = reinterpret_cast<const uint8_t*>(address);
  impl->worker_address.assign(a, a + address_length);
  ucp_worker_release_address(impl->worker, address);
  Impl* raw = impl.get();
  impl->progress = std::thread([raw] { raw->RunProgress(); });
  impl->delivery = std::thread([raw] { raw->RunDelivery(); });
  impl->closer = std::thread([raw] { raw->RunCloser(); });
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UcxTransport::~UcxTransport() {
  // From here every connection request is rejected (a request's handler may
  // run on any thread that progresses the worker, the closer's included), so
  // the listener stays until the last of them is joined.
  impl_->closing = true;
  std::map<ucp_ep_h, std::shared_ptr<UcxConnection>> conns;
  {
    MutexLock lock(impl_->mu);
    conns.swap(impl_->connections);
    impl_->pending.clear();
  }
  for (auto& [ep, c] : conns) c->Close();
  // The threads that may still refuse or close a connection go first, then
  // the closer, which releases everything queued (progressing the worker
  // itself) before it ends: nothing is released after the worker is gone.
  impl_->stop = true;
  ucp_worker_signal(impl_->worker);
  impl_->progress.join();
  impl_->cv.notify_all();
  impl_->delivery.join();
  {
    MutexLock lock(impl_->closer_mu);
    impl_->closer_stop = true;  // it releases what is queued first
  }
  impl_->closer_cv.notify_all();
  impl_->closer.join();
  if (impl_->listener) ucp_listener_destroy(impl_->listener);  // nothing progresses the worker now
  impl_->listener = nullptr;
  conns.clear();
  impl_->events.clear();
  impl_->closed.clear();
  for (ucp_mem_h m : impl_->mems) ucp_mem_unmap(impl_->context, m);
  ucp_worker_destroy(impl_->worker);
  ucp_cleanup(impl_->context);
}

StatusOr<Region> UcxTransport::AllocateRegion(size_t bytes) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.length = bytes;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(impl_->context, &mp, &memh);
  if (st != UCS_OK) return UcxError("ucp_mem_map of " + std::to_string(bytes) + " bytes", st);
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  st = ucp_mem_query(memh, &attr);
  if (st != UCS_OK) return UcxError("ucp_mem_query", st);
  void* packed = nullptr;
  size_t packed_size = 0;
  st = ucp_rkey_pack(impl_->context, memh, &packed, &packed_size);
  if (st != UCS_OK) return UcxError("ucp_rkey_pack", st);
  Region r;
  r.data = static_cast<uint8_t*>(attr.address);
  r.size = bytes;
  KeyHeader header;
  header.base = reinterpret_cast<uint64_t>(attr.address);
  header.shmid = SysvSegmentAt(attr.address);
  header.ipc_identity = IpcIdentity();
  header.bytes = bytes;
  r.key.blob.resize(kKeyHeaderBytes + packed_size);
  std::memcpy(r.key.blob.data(), &header, kKeyHeaderBytes);
  std::memcpy(r.key.blob.data() + kKeyHeaderBytes, packed, packed_size);
  r.key.size = bytes;
  ucp_rkey_buffer_release(packed);
  MutexLock lock(impl_->mu);
  impl_->mems.push_back(memh);
  return r;
}

Status UcxTransport::Listen(const std::string& address,
                            std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept) {
  TANDEM_ASSIGN_OR_RETURN(sockaddr_in sa, ParseHostPort(address));
  impl_->on_accept = std::move(on_accept);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  lp.sockaddr.addrlen = sizeof(sa);
  lp.conn_handler.arg = impl_.get();
  lp.conn_handler.cb = [](ucp_conn_request_h request, void* arg) {
    auto* t = static_cast<Impl*>(arg);
    if (t->closing) {
      ucp_listener_reject(t->listener, request);
      return;
    }
    if (t->knock != 0) {
      ucp_conn_request_attr_t attr{};
      attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID;
      const bool knocked = ucp_conn_request_query(request, &attr) == UCS_OK && attr.client_id == t->knock;
      if (!knocked) {
        // Nothing of this peer is kept: no endpoint, no connection, no buffer.
        ucp_listener_reject(t->listener, request);
        t->refusals.Count("its connection request does not carry the cluster key's knock");
        return;
      }
    }
    std::shared_ptr<UcxConnection> conn, oldest;
    {
      MutexLock lock(t->mu);
      conn = std::make_shared<UcxConnection>(t, t->next_id++);
      conn->accepted_ = true;
      // Full: the one that has waited longest goes, not the newcomer, so
      // silent connections held open cannot keep a real peer out.
      if (t->gate && int(t->pending.size()) >= t->gate->max_pending) {
        oldest = std::move(t->pending.begin()->second);
        t->pending.erase(t->pending.begin());
      }
    }
    if (oldest) {
      t->Refuse(oldest, "too many connections are waiting to authenticate (" + std::to_string(t->gate->max_pending) +
                            "): the longest waiting is closed");
    }
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.conn_request = request;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &OnError;
    ep.err_handler.arg = t;
    if (ucp_ep_create(t->worker, &ep, &conn->ep_) != UCS_OK) return;
    if (t->gate) {
      conn->gated_ = true;
      conn->gate_deadline_ = Env::Default().Now() + t->gate->deadline;
    }
    {
      MutexLock lock(t->mu);
      t->connections[conn->ep_] = conn;
      if (t->gate) t->pending[conn->id()] = conn;
    }
    if (t->gate) {
      t->cv.notify_all();  // the delivery thread watches its deadline
      return;
    }
    // The owner's on_accept runs on the delivery thread, never inside a
    // progress call (a Flush progresses the worker while holding its locks).
    auto e = UcxTransport::Impl::Event::Message(conn, {});
    e.accepted = true;
    t->Post(std::move(e));
  };
  const ucs_status_t st = ucp_listener_create(impl_->worker, &lp, &impl_->listener);
  if (st != UCS_OK) return UcxError("cannot listen on " + address + " (ucp_listener_create)", st);
  return Status::Ok();
}

Status UcxTransport::SetFirstMessageGate(FirstMessageGate gate) {
  if (impl_->listener) return FailedPrecondition("the gate is set before Listen");
  impl_->gate = std::move(gate);
  return Status::Ok();
}

std::map<std::string, int64_t> UcxTransport::refusals() const { return impl_->refusals.counts(); }

int UcxTransport::listen_port() const {
  if (!impl_->listener) return -1;
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (ucp_listener_query(impl_->listener, &attr) != UCS_OK) return -1;
  return ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
}

StatusOr<std::shared_ptr<Connection>> UcxTransport::Connect(const std::string& address,
                                                            ConnectionHandlers handlers) {
  TANDEM_ASSIGN_OR_RETURN(sockaddr_in sa, ParseHostPort(address));
  std::shared_ptr<UcxConnection> conn;
  {
    MutexLock lock(impl_->mu);
    conn = std::make_shared<UcxConnection>(impl_.get(), impl_->next_id++);
  }
  conn->handlers_ = std::move(handlers);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  if (impl_->knock != 0) ep.flags |= UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  ep.sockaddr.addrlen = sizeof(sa);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &OnError;
  ep.err_handler.arg = impl_.get();
  const ucs_status_t st = ucp_ep_create(impl_->worker, &ep, &conn->ep_);
  if (st != UCS_OK) return UcxError("cannot connect to " + address, st);
  {
    MutexLock lock(impl_->mu);
    impl_->connections[conn->ep_] = conn;
  }
  if (Status sent = conn->SendAm(kAddressAmId, impl_->worker_address); !sent.ok()) {
    conn->Close();
    return sent;
  }
  return std::shared_ptr<Connection>(conn);
}

}  // namespace tandem::transfer
