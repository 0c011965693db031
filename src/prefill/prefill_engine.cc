#include "prefill/prefill_engine.h"

#include "common/env.h"
#include "transfer/message_auth.h"
#include "common/log.h"

#include <cstdio>

#include "transfer/checksum.h"
#include "transfer/handshake.h"

namespace tandem {

using transfer::Clock;

namespace {

uint64_t Micros(Clock::duration d) {
  return uint64_t(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}

}  // namespace

StatusOr<std::unique_ptr<PrefillEngine>> PrefillEngine::Create(const Model& model, PrefillOptions options) {
  if (options.max_queue < 1) return InvalidArgument("the prefill queue must hold at least one handoff");
  options.engine.max_waiting = int32_t(std::min<size_t>(options.max_queue, 1 << 30));
  options.engine.env = options.env;  // one time for the role and its engine (a handoff's deadline is both's)
  auto p = std::unique_ptr<PrefillEngine>(new PrefillEngine(model, options));
  TANDEM_ASSIGN_OR_RETURN(p->engine_, Engine::Create(model, p->options_.engine, static_cast<EngineRole&>(*p)));
  const CacheSpec& spec = p->engine_->cache_spec();
  p->layout_fingerprint_ = CacheLayout(spec.registry, int(model.config().n_layers),
                                       (p->options_.engine.cache_tokens + kPageTokens - 1) / kPageTokens)
                               .Fingerprint() +
                           ";" + AttentionFingerprint(spec.attention);
  p->numerics_ = p->engine_->numerics().HandshakeFingerprint();
  p->heartbeat_thread_ = std::thread([e = p.get()] { e->RunHeartbeats(); });
  return p;
}

PrefillEngine::PrefillEngine(const Model& model, PrefillOptions options)
    : model_(model),
      options_(std::move(options)),
      instance_id_(transfer::NewInstanceId()),
      weights_identity_(WeightsIdentity(model)) {}

PrefillEngine::~PrefillEngine() { Stop(); }

PrefillEngine::Stats PrefillEngine::stats() const {
  const EngineStats e = engine_->Stats();
  MutexLock lock(mu_);
  Stats s = stats_;
  s.connections = int64_t(peers_.size());
  s.in_flight = int64_t(handoffs_.size());
  s.queued = e.waiting;
  s.cached_pages = e.cached_pages;
  s.pages_in_use = e.pages.used - e.cached_pages;
  s.cached_tokens = e.prefix_hit_tokens;
  return s;
}

void PrefillEngine::Refuse(transfer::Connection& c, uint64_t handoff_id, const std::string& why, AbortCode code) {
  ++stats_.refused;
  (void)c.Send(Abort{handoff_id, code, why}.Encode());
}

void PrefillEngine::OnAccept(std::shared_ptr<transfer::Connection> connection) {
  MutexLock lock(mu_);
  Peer& peer = peers_[connection->id()];
  peer.connection = std::move(connection);
  peer.last_heard = options_.env->Now();  // silent from here on counts too
}

Status PrefillEngine::CheckFirstMessage(std::span<const uint8_t> bytes, std::vector<uint8_t>* reply) const {
  const std::vector<uint8_t> message(bytes.begin(), bytes.end());
  auto hello = Hello::Decode(message);
  const Hello mine = OurHello(hello.ok() ? hello->instance_id : 0);
  Status st = CheckTheirHello(mine, hello, /*seen=*/nullptr);
  if (!st.ok()) *reply = mine.Encode();
  return st;
}

Hello PrefillEngine::OurHello(uint64_t theirs) const {
  return Hello{"prefill", layout_fingerprint_, weights_identity_, instance_id_, theirs, {}, {}, {}, numerics_};
}

Status PrefillEngine::CheckTheirHello(const Hello& mine, const StatusOr<Hello>& theirs,
                                      transfer::NonceMemory* seen) const {
  if (!theirs.ok()) return theirs.status();
  TANDEM_RETURN_IF_ERROR(transfer::CheckHello(mine, *theirs, options_.allow_mixed_numerics));
  return transfer::CheckDecodeHello(options_.cluster_key, *theirs, seen, ListenAddress());
}

// Accepts or refuses a decode engine's Hello; a refused connection, and the
// earlier connections of a decode instance that reconnected, are closed.
void PrefillEngine::OnHello(Peer& peer, const std::vector<uint8_t>& bytes) {
  auto hello = Hello::Decode(bytes);
  const uint64_t theirs = hello.ok() ? hello->instance_id : 0;
  Hello mine = OurHello(theirs);
  const Status st = CheckTheirHello(mine, hello, &seen_nonces_);
  if (!st.ok()) {
    TLOG_WARN("tandem prefill: refusing decode engine %llu: %s\n", (unsigned long long)theirs,
                 st.message().c_str());
    (void)peer.connection->Send(mine.Encode());  // the decode side checks too, and reports
    ++stats_.peers_closed;
    DropPeerLocked(peer.connection->id());  // our Hello still goes out first
    return;
  }
  peer.hello_ok = true;
  peer.decode_instance = theirs;
  peer.nonce = transfer::SignPrefillHello(options_.cluster_key, *hello, &mine);
  // Everything after the Hellos is sealed with this connection's session.
  peer.auth = std::make_shared<transfer::MessageAuth>(options_.cluster_key, hello->nonce, peer.nonce,
                                                      /*decode_side=*/false);
  peer.sealed = transfer::SealedConnection(peer.connection, peer.auth);
  const uint64_t id = peer.connection->id();
  std::vector<uint64_t> stale;  // earlier connections of the same decode instance: dead to it
  for (auto& [other_id, other] : peers_) {
    if (other_id != id && other.decode_instance == theirs) stale.push_back(other_id);
  }
  for (uint64_t s : stale) DropPeerLocked(s);
  // Our answer promises the decode side that nothing of an earlier connection
  // of its own still writes into its pages (docs/handoff-states.md, the fence).
  auto conn = peers_.at(id).connection;
  if (MayAnswerLocked(theirs, id)) {
    (void)conn->Send(mine.Encode());
    peers_.at(id).answered = true;
  } else {
    deferred_hellos_.push_back({conn, mine});
  }
}

void PrefillEngine::OnMessage(std::shared_ptr<transfer::Connection> connection, const std::vector<uint8_t>& bytes) {
  auto type = PeekType(bytes);
  MutexLock lock(mu_);
  auto it = peers_.find(connection->id());
  if (it == peers_.end() || !connection->alive() || stopping_) return;  // dropped: its handoffs are already gone
  Peer& peer = it->second;
  peer.last_heard = options_.env->Now();
  if (peer.hello_ok && !(peer.opened == 0 && transfer::IsUnsealedHeartbeat(bytes))) {
    // After the Hellos only sealed messages count (a heartbeat the decode
    // side sent before our answer reached it is the one exception).
    std::vector<uint8_t> opened = bytes;
    if (Status st = peer.auth->Open(&opened); !st.ok()) {
      TLOG_WARN("tandem prefill: closing the connection of decode engine %llu: %s\n",
                (unsigned long long)peer.decode_instance, st.message().c_str());
      ++stats_.peers_closed;
      DropPeerLocked(connection->id());
      return;
    }
    ++peer.opened;
    return OnAuthenticMessage(peer, opened);
  }
  if (!type.ok() && !peer.hello_ok) {
    // A first message we cannot read (another wire version, or not tandem): a
    // refused handshake, said plainly (our Hello names our version), not a silent drop.
    TLOG_WARN("tandem prefill: refusing a decode engine whose first message is unreadable: %s\n",
                 type.status().ToString().c_str());
    (void)connection->Send(OurHello(0).Encode());
    ++stats_.peers_closed;
    DropPeerLocked(connection->id());
    return;
  }
  if (!type.ok()) {
    TLOG_WARN("tandem prefill: dropping a malformed message: %s\n", type.status().ToString().c_str());
    return;
  }
  switch (*type) {  // before an accepted Hello
    case MessageType::kHello:
      return OnHello(peer, bytes);
    case MessageType::kDestination:
      return OnDestination(peer, connection, bytes);  // refused: no accepted Hello
    case MessageType::kAbort:
      return OnAbort(connection, bytes);  // nothing of it is ours: acknowledged
    case MessageType::kHeartbeat:
    case MessageType::kCommit:
    case MessageType::kAbortAck:
      return;
  }
}

// A message the peer's session authenticated (or any after the Hello when
// there is no cluster key).
void PrefillEngine::OnAuthenticMessage(Peer& peer, const std::vector<uint8_t>& bytes) {
  auto type = PeekType(bytes);
  if (!type.ok()) {
    TLOG_WARN("tandem prefill: dropping a malformed message: %s\n", type.status().ToString().c_str());
    return;
  }
  switch (*type) {
    case MessageType::kHello:
      TLOG_WARN("tandem prefill: ignoring a second Hello from decode engine %llu\n",
                (unsigned long long)peer.decode_instance);
      return;
    case MessageType::kHeartbeat:
      return;  // last_heard is all a heartbeat is for
    case MessageType::kDestination:
      return OnDestination(peer, peer.sealed, bytes);
    case MessageType::kAbort:
      return OnAbort(peer.sealed, bytes);
    case MessageType::kCommit:
    case MessageType::kAbortAck:
      return;  // decode engines send neither; ignored
  }
}

void PrefillEngine::OnDestination(Peer& peer, const std::shared_ptr<transfer::Connection>& connection,
                                  const std::vector<uint8_t>& bytes) {
  auto d = Destination::Decode(bytes);
  if (!d.ok()) {
    // Without a valid message there is no id to answer; the decode side's deadline ends it.
    TLOG_WARN("tandem prefill: bad destination: %s\n", d.status().ToString().c_str());
    return;
  }
  const uint64_t id = d->handoff_id;
  if (!peer.hello_ok) return Refuse(*connection, id, "no accepted Hello on this connection");
  if (d->decode_instance_id != peer.decode_instance) {
    return Refuse(*connection, id, "destination names another decode instance than its Hello");
  }
  if (!transfer::DestinationAuthentic(options_.cluster_key, peer.nonce, *d)) {
    return Refuse(*connection, id, "destination is not authenticated by the cluster key of this connection");
  }
  const int64_t n = int64_t(d->tokens.size());
  const int64_t n_pages = (n + kPageTokens - 1) / kPageTokens;
  if (d->skip_tokens % kPageTokens != 0 || d->skip_tokens >= n ||
      int64_t(d->pages.size()) != n_pages - d->skip_tokens / kPageTokens) {
    return Refuse(*connection, id, "destination does not cover the prompt: " + std::to_string(d->pages.size()) +
                                       " pages for " + std::to_string(n) + " tokens after " +
                                       std::to_string(d->skip_tokens));
  }
  if (d->pool_pages < 1) return Refuse(*connection, id, "destination names no decode pool size");
  for (const PageRef& p : d->pages) {
    if (p.page >= d->pool_pages) {
      return Refuse(*connection, id, "destination page " + std::to_string(p.page) + " is outside the decode pool");
    }
  }
  if (by_peer_.count({connection->id(), id})) {
    // A duplicate (the decode side's bug, or a duplicated message): never
    // answer it, since an Abort for this id would free the pages the live
    // handoff is writing into.
    TLOG_WARN("tandem prefill: ignoring a second destination for handoff %llu on connection %llu (already in flight)",
              (unsigned long long)id, (unsigned long long)connection->id());
    return;
  }
  auto h = std::make_shared<Handoff>(std::chrono::milliseconds(d->time_budget_ms), options_.env->Now());
  h->connection = connection;
  h->taken = options_.env->Now();
  h->decode_instance = peer.decode_instance;
  h->deadline = options_.env->Now() + std::chrono::milliseconds(d->time_budget_ms);
  h->sent_upto = d->skip_tokens;
  RequestSpec spec;
  spec.prompt = d->tokens;
  spec.sampling = d->sampling;
  spec.cache_salt = d->cache_salt;
  spec.max_tokens = 1;
  spec.ignore_eos = true;  // the first token is the decode side's to judge
  spec.deadline = h->deadline;
  h->destination = std::move(d).value();
  h->sender = std::make_unique<HandoffSender>(connection, h->destination, engine_->cache_spec().registry,
                                              int(model_.config().n_layers));
  // Submitted under mu_: the engine's calls for it wait until it is in the table.
  auto handle = engine_->Submit(std::move(spec));
  if (!handle.ok()) {
    if (handle.status().code() == StatusCode::kResourceExhausted) {
      return Refuse(*connection, id, "the prefill queue is full (" + std::to_string(options_.max_queue) + " handoffs)",
                    AbortCode::kQueueFull);
    }
    return Refuse(*connection, id, handle.status().message());
  }
  h->handle = *handle;
  by_peer_[{connection->id(), id}] = h->handle->id();
  handoffs_[h->handle->id()] = std::move(h);
}

void PrefillEngine::OnAbort(const std::shared_ptr<transfer::Connection>& connection, const std::vector<uint8_t>& bytes) {
  auto abort = Abort::Decode(bytes);
  if (!abort.ok()) return;
  const uint64_t id = abort->handoff_id;
  auto it = by_peer_.find({connection->id(), id});
  if (it != by_peer_.end()) {
    Handoff& h = *handoffs_.at(it->second);
    if (h.machine.state() != transfer::HandoffState::kCommitted) {
      // Acknowledged when the engine has dropped it and its writes are flushed (OnEnd).
      h.abort_requested = true;
      h.handle->Cancel();
      return;
    }
  }
  ++stats_.aborted;
  // Committed, or unknown: nothing of ours is in flight for it.
  (void)connection->Send(AbortAck{id}.Encode());
}

void PrefillEngine::OnClose(uint64_t connection_id) {
  MutexLock lock(mu_);
  DropPeerLocked(connection_id);
}

void PrefillEngine::DropPeerLocked(uint64_t connection_id) {
  auto it = peers_.find(connection_id);
  if (it != peers_.end()) {
    // Closed here, under mu_, so nothing else goes out on it first (Close never
    // waits for our handlers: they run later, on the transport's threads).
    it->second.connection->Close();
    if (it->second.decode_instance != 0) closing_[it->second.decode_instance].push_back(it->second.connection);
    peers_.erase(it);
  }
  for (auto& [request, h] : handoffs_) {
    if (h->connection->id() != connection_id) continue;
    h->peer_gone = true;
    h->handle->Cancel();  // the engine drops it at its next step
  }
}

// A Hello on a new connection promises that nothing of an earlier connection
// of that decode instance still writes: answered once no handoff of one is
// left and every one of them is released (its pending puts completed or cancelled).
bool PrefillEngine::MayAnswerLocked(uint64_t decode_instance, uint64_t connection_id) {
  for (const auto& [request, h] : handoffs_) {
    if (h->decode_instance == decode_instance && h->connection->id() != connection_id) return false;
  }
  auto it = closing_.find(decode_instance);
  if (it == closing_.end()) return true;
  // Asked without waiting: the transport's clock is the real one.
  std::erase_if(it->second, [](const auto& c) { return c->WaitReleased(Env::Default().Now()); });
  if (!it->second.empty()) return false;
  closing_.erase(it);
  return true;
}

void PrefillEngine::AnswerDeferredHellosLocked() {
  std::erase_if(deferred_hellos_, [&](const auto& d) REQUIRES(mu_) {
    if (!d.first->alive()) return true;
    if (!MayAnswerLocked(d.second.peer_instance_id, d.first->id())) return false;
    (void)d.first->Send(d.second.Encode());
    if (auto p = peers_.find(d.first->id()); p != peers_.end()) p->second.answered = true;
    return true;
  });
}

void PrefillEngine::RunHeartbeats() {
  UniqueLock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock.native(), options_.heartbeat_interval, [&]() REQUIRES(mu_) { return stop_; });
    if (stop_) return;
    const auto now = options_.env->Now();
    std::vector<std::shared_ptr<transfer::Connection>> silent;
    for (auto& [id, peer] : peers_) {
      if (now - peer.last_heard > options_.peer_timeout || !peer.connection->alive()) {
        silent.push_back(peer.connection);
      } else {
        // Sealed once our Hello has gone out; plain before (it has no session yet).
        (void)(peer.answered ? peer.sealed : peer.connection)->Send(Heartbeat{instance_id_}.Encode());
      }
    }
    for (auto& c : silent) {
      TLOG_WARN("tandem prefill: decode engine on connection %llu silent for more than %lld ms: closing\n",
                   (unsigned long long)c->id(), (long long)options_.peer_timeout.count());
      DropPeerLocked(c->id());  // closes it; its handoffs end
    }
    stats_.peers_closed += int64_t(silent.size());
    AnswerDeferredHellosLocked();
    for (auto it = closing_.begin(); it != closing_.end();) {  // forget what is released
      std::erase_if(it->second, [](const auto& c) { return c->WaitReleased(Env::Default().Now()); });
      it = it->second.empty() ? closing_.erase(it) : std::next(it);
    }
  }
}

std::shared_ptr<PrefillEngine::Handoff> PrefillEngine::Find(uint64_t request) {
  MutexLock lock(mu_);
  auto it = handoffs_.find(request);
  return it == handoffs_.end() ? nullptr : it->second;
}

void PrefillEngine::BeforeForward(std::span<Sequence* const> members, std::span<const SequenceChunk> batch) {
  step_.clear();
  for (size_t b = 0; b < members.size(); ++b) {
    step_.push_back({members[b]->handle->id(), batch[b].start_pos, batch[b].start_pos + int64_t(batch[b].tokens.size()),
                     members[b]->pages, members[b]->gates.get()});
  }
}

void PrefillEngine::OnLayer(int layer) {
  PagePool& pool = host_->pool();
  const int last_layer = int(model_.config().n_layers) - 1;
  for (const PrefilledChunk& c : step_) {
    std::shared_ptr<Handoff> h = Find(c.request);
    if (!h || !h->error.ok()) continue;
    if (layer == 0) {
      // The first step after a prefix hit also sends the cached pages the decode side lacks.
      h->step_from = std::min(h->sent_upto, c.begin);
      if (h->compute_start == Clock::time_point{}) {
        h->compute_start = options_.env->Now();
        MutexLock lock(mu_);
        (void)h->machine.Transition(transfer::HandoffState::kTransferring, h->compute_start);
      }
    }
    if (c.gates != nullptr) c.gates->Wait(layer);  // cached rows loaded from a lower tier have landed
    // Only complete pages (and the prompt's last one): a page is written once,
    // so no two puts into the same remote bytes are ever in flight unordered
    // (a partial page is sent by the step that completes it).
    const int64_t n = int64_t(h->destination.tokens.size());
    const int64_t end = c.end >= n ? n : c.end / kPageTokens * kPageTokens;
    if (end > h->step_from) {
      Status st = h->sender->PutLayer(layer, h->step_from, end, c.pages, pool);
      if (!st.ok()) {
        h->error = st;
        h->handle->Cancel();  // nothing more to compute for it
        continue;
      }
    }
    if (layer == last_layer) h->sent_upto = std::max(h->sent_upto, end);
  }
}

std::optional<FinishReason> PrefillEngine::TakeToken(Sequence& s, int32_t first_token) {
  const auto prompt = std::span<const int32_t>(s.tokens).first(size_t(s.prompt_len));
  return SendCommit(s.handle->id(), prompt, s.pages, first_token) ? FinishReason::kHandedOff : FinishReason::kCancelled;
}

bool PrefillEngine::SendCommit(uint64_t request, std::span<const int32_t> prompt, std::span<const int32_t> pages,
                               int32_t first_token) {
  PagePool& pool = host_->pool();
  std::shared_ptr<Handoff> h = Find(request);
  if (!h || !h->error.ok() || h->handle->cancelled()) return false;
  const Destination& d = h->destination;
  // Layer writes overlap the compute; what remains after it is the flush.
  const auto flush_start = options_.env->Now();
  if (!FlushWrites(*h).ok()) return false;
  const auto flush_end = options_.env->Now();
  if (flush_end > h->deadline) {
    h->error = Status(StatusCode::kDeadlineExceeded, "its time budget ran out at the prefill engine (" +
                                                         std::to_string(d.time_budget_ms) + " ms)");
    h->out_of_budget = true;
    return false;
  }
  Commit commit;
  commit.handoff_id = d.handoff_id;
  commit.pages_digest = PagesDigest(d.pages);
  commit.first_token = first_token;
  commit.digests = DigestPages(pool, pages, d.skip_tokens, int64_t(prompt.size()));
  commit.compute_us = Micros(flush_start - (h->compute_start == Clock::time_point{} ? flush_start : h->compute_start));
  commit.transfer_us = Micros(flush_end - flush_start);
  commit.queue_us = Micros((h->compute_start == Clock::time_point{} ? flush_start : h->compute_start) - h->taken);
  MutexLock lock(mu_);
  if (h->handle->cancelled()) return false;  // an Abort came first: acknowledged in OnEnd
  Status sent = h->connection->Send(commit.Encode());
  if (!sent.ok()) {
    h->error = sent;
    return false;
  }
  if (h->machine.state() == transfer::HandoffState::kBootstrapping) {  // nothing to write: all cached on the decode side
    (void)h->machine.Transition(transfer::HandoffState::kTransferring, options_.env->Now());
  }
  if (Status st = h->machine.Transition(transfer::HandoffState::kCommitted, options_.env->Now()); !st.ok()) {
    TLOG_ERROR("tandem prefill: %s\n", st.message().c_str());  // a Commit went out: count it as one
  }
  return true;
}

Status PrefillEngine::FlushWrites(Handoff& h) {
  Status flushed = h.sender->Flush(*options_.env, h.deadline, options_.peer_timeout);
  if (!flushed.ok() && h.error.ok()) h.error = flushed;
  return flushed;
}

void PrefillEngine::BeforeRelease(const Sequence& s) {
  std::shared_ptr<Handoff> h = Find(s.handle->id());
  if (!h || !h->sender->posted()) return;
  // Pages about to be freed (or recomputed) may not be read by a write in
  // flight: flush first. When the flush fails, the transport may still read
  // them after they are reused, and what lands then is garbage in a handoff
  // that is never committed (OnEnd closes its connection, which frees the
  // destination's pages). The memory stays allocated: `tandem prefill`
  // destroys its transport before this engine.
  if (!FlushWrites(*h).ok()) h->handle->Cancel();
}

void PrefillEngine::OnEnd(const Sequence& s, FinishReason reason, const Status& error) {
  switch (reason) {
    case FinishReason::kHandedOff: return EndHandoff(s.handle->id(), Status::Ok());
    case FinishReason::kCancelled: return EndHandoff(s.handle->id(), Status(StatusCode::kAborted, "cancelled"));
    case FinishReason::kError: return EndHandoff(s.handle->id(), error);
    case FinishReason::kStop:
    case FinishReason::kLength:
      return EndHandoff(s.handle->id(), ResourceExhausted("the prompt does not fit in the prefill engine's cache"));
  }
}

void PrefillEngine::EndHandoff(uint64_t request, const Status& status) {
  MutexLock lock(mu_);
  auto it = handoffs_.find(request);
  if (it == handoffs_.end()) return;
  std::shared_ptr<Handoff> h = std::move(it->second);
  handoffs_.erase(it);
  const uint64_t id = h->destination.handoff_id;
  by_peer_.erase({h->connection->id(), id});
  const Status why = !h->error.ok() ? h->error : status;
  const bool committed = h->machine.state() == transfer::HandoffState::kCommitted;
  if (!committed) {
    (void)h->machine.Transition(h->abort_requested || h->peer_gone ? transfer::HandoffState::kAborted
                                                                   : transfer::HandoffState::kFailed,
                                options_.env->Now());
  }
  if (committed && why.ok()) {
    ++stats_.committed;
  } else if (!h->sender->fenced()) {
    // We cannot prove our writes landed: never acknowledge. Closing the
    // endpoint is what frees the decode side's pages.
    TLOG_WARN("tandem prefill: handoff %llu ended (%s) without a confirmed flush: closing connection %llu\n",
                 (unsigned long long)id, why.ToString().c_str(), (unsigned long long)h->connection->id());
    if (peers_.count(h->connection->id())) ++stats_.peers_closed;
    DropPeerLocked(h->connection->id());  // closes it, under mu_: no late AbortAck goes out first
    h->connection->Close();               // (already dropped by a reconnect: close it all the same)
  } else if (h->peer_gone) {
    ++stats_.aborted;  // its connection is closed: nothing to say
  } else if (h->abort_requested) {
    ++stats_.aborted;
    (void)h->connection->Send(AbortAck{id}.Encode());
  } else {
    std::string reason = why.message();
    AbortCode code = AbortCode::kFailed;
    if (why.code() == StatusCode::kDeadlineExceeded) code = AbortCode::kDeadline;
    if (why.code() == StatusCode::kDeadlineExceeded && !h->out_of_budget) {
      reason = "its time budget ran out at the prefill engine (" + std::to_string(h->destination.time_budget_ms) +
               " ms): " + why.message();
    } else if (why.code() == StatusCode::kAborted) {
      reason = "the prefill engine is stopping";
      code = AbortCode::kStopping;
    }
    ++stats_.failed;
    TLOG_WARN("tandem prefill: handoff %llu failed: %s\n", (unsigned long long)id, reason.c_str());
    (void)h->connection->Send(Abort{id, code, reason}.Encode());
  }
  // Its writes flushed, or its connection closed: answer the Hellos that
  // waited for it (once that connection is released too).
  AnswerDeferredHellosLocked();
}

void PrefillEngine::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;  // no new handoffs (nor messages)
  }
  // Ends every handoff (OnEnd); heartbeats go on meanwhile, so a silent peer
  // is still closed and no flush waits for it past the peer timeout.
  if (engine_) engine_->Shutdown(std::chrono::milliseconds(0));
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

}  // namespace tandem
