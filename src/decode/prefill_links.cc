#include "decode/prefill_links.h"
#include "common/env.h"
#include "common/log.h"

#include <algorithm>
#include <cstdio>

#include "common/chain_key.h"
#include "common/placement.h"
#include "transfer/handshake.h"

namespace tandem::decode {

using transfer::Clock;

long long PrefillLinks::Ms(Clock::duration d) {
  return (long long)std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

PrefillLinks::PrefillLinks(PrefillLinksOptions options)
    : options_(std::move(options)), instance_id_(transfer::NewInstanceId()) {}

StatusOr<std::unique_ptr<PrefillLinks>> PrefillLinks::Connect(PrefillLinksOptions options) {
  if (options.addresses.empty() && !options.discovered) return InvalidArgument("no prefill engine address");
  if (options.env == nullptr) return InvalidArgument("the prefill links need an Env");
  auto r = std::unique_ptr<PrefillLinks>(new PrefillLinks(std::move(options)));
  if (r->options_.make_transport) {
    TANDEM_ASSIGN_OR_RETURN(r->transport_, r->options_.make_transport());
    if (r->transport_ == nullptr) return InvalidArgument("the prefill links' transport factory made no transport");
  } else {
    TANDEM_ASSIGN_OR_RETURN(r->transport_, transfer::MakeTransport(r->options_.transport, r->options_.cluster_key.Knock()));
  }
  TANDEM_ASSIGN_OR_RETURN(r->region_, r->transport_->AllocateRegion(r->options_.pool_bytes));
  const auto now = r->Now();
  for (const std::string& address : r->options_.addresses) {
    Link link;
    link.address = address;
    link.backoff = r->options_.reconnect_min;
    r->links_.push_back(std::move(link));
  }
  for (size_t i = 0; i < r->links_.size(); ++i) r->Reconnect(i, now);
  r->heartbeat_thread_ = std::thread([p = r.get()] { p->RunHeartbeats(); });
  return r;
}

void PrefillLinks::RunHeartbeats() {
  UniqueLock lock(mu_);
  while (!stop_) {
    stop_cv_.wait_for(lock.native(), options_.heartbeat_interval, [&]() REQUIRES(mu_) { return stop_; });
    for (auto& [link, c] : beating_) (void)c->Send(Heartbeat{instance_id_}.Encode());
  }
}

PrefillLinks::~PrefillLinks() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    beating_.clear();
  }
  stop_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  receiver_.reset();  // releases what it holds before the connections go
  for (Link& l : links_) {
    if (l.connection) l.connection->Close();
  }
  links_.clear();
  // The transport's threads run our handlers (which touch inbox_) until it is
  // destroyed: destroy it while every other member is still alive.
  transport_.reset();
}

void PrefillLinks::Attach(PagePool& pool, PrefixIndex* index) {
  receiver_ = std::make_unique<transfer::HandoffReceiver>(pool, region_.key, index, options_.receiver);
  windows_owner_ = std::make_unique<transfer::WriteWindows>(pool.layout());
  receiver_->SetWriteWindows(windows_owner_.get());
  windows_ = windows_owner_.get();
  const auto until = Env::Default().Now() + options_.startup_wait;  // real time: a wait, not a deadline of the protocol
  auto connecting = [&] {
    return std::any_of(links_.begin(), links_.end(), [](const Link& l) { return l.state == LinkState::kConnecting; });
  };
  while (connecting() && Env::Default().Now() < until) {
    {
      UniqueLock lock(mu_);
      arrived_.wait_until(lock.native(), std::min(until, Env::Default().Now() + std::chrono::milliseconds(50)),
                          [&]() REQUIRES(mu_) { return !inbox_.empty(); });
    }
    (void)Poll();  // nothing can have begun yet: no outcomes
  }
}

Hello PrefillLinks::MyHello(uint64_t peer_instance) const {
  return Hello{"decode", options_.layout_fingerprint, options_.weights_identity, instance_id_, peer_instance, {}, {}, {}, options_.numerics};
}

bool PrefillLinks::healthy() const {
  return std::any_of(links_.begin(), links_.end(), [](const Link& l) { return l.state == LinkState::kUp && l.listed; });
}

void PrefillLinks::SetAddresses(std::vector<std::string> addresses) {
  {
    MutexLock lock(mu_);
    named_ = std::move(addresses);
  }
  arrived_.notify_all();
}

void PrefillLinks::ApplyAddresses(const std::vector<std::string>& addresses, Clock::time_point now) {
  for (Link& link : links_) {
    const bool named = std::find(addresses.begin(), addresses.end(), link.address) != addresses.end();
    if (named == link.listed) continue;
    link.listed = named;
    TLOG_INFO("tandem decode: prefill engine %s %s\n", link.address.c_str(),
              named ? "is registered again" : "is no longer registered: no new handoffs go there");
    if (named && link.state == LinkState::kDown) {
      link.backoff = options_.reconnect_min;
      link.retry_at = now;
    }
  }
  for (const std::string& address : addresses) {
    if (std::any_of(links_.begin(), links_.end(), [&](const Link& l) { return l.address == address; })) continue;
    if (links_.size() == kMaxLinks) {
      TLOG_WARN("tandem decode: not linking to prefill engine %s: %zu addresses known (restart to forget old ones)\n",
                address.c_str(), kMaxLinks);
      continue;
    }
    TLOG_INFO("tandem decode: prefill engine %s is registered: connecting\n", address.c_str());
    Link link;
    link.address = address;
    link.backoff = options_.reconnect_min;
    links_.push_back(std::move(link));
    Reconnect(links_.size() - 1, now);
  }
}

std::string PrefillLinks::problem() const {
  std::string out;
  for (const Link& l : links_) {
    if (l.state != LinkState::kUp && l.listed) out += (out.empty() ? "" : "; ") + l.address + ": " + l.problem;
  }
  if (out.empty()) out = "no prefill engine is registered";
  return out;
}

PrefillLinks::Counters PrefillLinks::counters() const {
  const transfer::ReceiverStats& r = receiver_->stats();
  Counters c;
  c.committed = r.committed;
  c.failed = r.failed;
  c.aborted = r.aborted;
  c.verified = r.verified;
  c.digest_mismatches = r.digest_mismatches;
  c.quarantined_pages = r.quarantined_pages;
  c.buffer_bytes = r.committed_bytes;
  c.in_flight = int64_t(receiver_->open_handoffs());
  c.links_up = links_up();
  c.reconnects = reconnects_;
  c.links_declared_dead = peers_declared_dead_;
  c.affinity_hits = affinity_hits_;
  c.cached_hits = cached_hits_;
  c.messages = messages_;
  return c;
}

int64_t PrefillLinks::links_up() const {
  return std::count_if(links_.begin(), links_.end(), [](const Link& l) { return l.state == LinkState::kUp && l.listed; });
}

Status PrefillLinks::Start(uint64_t handoff_id, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                            uint64_t replaces, uint64_t cache_salt) {
  size_t avoid = links_.size();
  if (auto f = failed_on_.find(replaces); f != failed_on_.end()) avoid = f->second;
  // Where the conversation's prefix is cached: the engine that computed the
  // longest full-page prefix of this prompt (as far as we know), unless it
  // is clearly busier than the others (common/placement.h).
  const std::vector<uint64_t> keys = ChainKeys(tokens, kPageTokens, CacheRoot(cache_salt));
  int preferred = -1;
  bool by_cache = false;
  if (options_.cached != nullptr) {
    std::vector<std::string> names;
    for (const Link& l : links_) names.push_back(l.address);
    preferred = options_.cached->Longest(names, keys);
    by_cache = preferred >= 0;
  }
  for (size_t k = keys.size(); k-- > 0 && preferred < 0;) preferred = affinity_.Find(keys[k]);
  std::vector<int64_t> load(links_.size(), 0);
  for (const auto& [id, l] : handoff_link_) ++load[l];
  int picked = -1;
  for (int pass = 0; pass < 2 && picked < 0; ++pass) {
    std::vector<bool> usable(links_.size());
    for (size_t i = 0; i < links_.size(); ++i) {
      usable[i] = links_[i].state == LinkState::kUp && links_[i].listed && (pass == 1 || i != avoid);
    }
    picked = PickTarget(load, usable, preferred, &next_link_);
  }
  if (picked < 0) return Unavailable("no prefill engine is available: " + problem());
  const size_t link = size_t(picked);
  const auto now = Now();
  TANDEM_ASSIGN_OR_RETURN(Destination d, receiver_->Begin(handoff_id, tokens, links_[link].connection_id, now, cache_salt));
  failed_on_.erase(replaces);
  d.sampling = sampling;
  d.decode_instance_id = instance_id_;
  d.time_budget_ms = std::max<int64_t>(1, Ms(receiver_->deadline(handoff_id) - now));
  transfer::SignDestination(options_.cluster_key, links_[link].prefill_nonce, &d);
  handoff_link_[handoff_id] = link;
  Status st = links_[link].connection->Send(d.Encode());
  if (st.ok()) {
    for (uint64_t k : keys) affinity_.Record(k, int(link));  // its full pages will be cached there
    if (by_cache && picked == preferred) {
      ++cached_hits_;
    } else if (preferred >= 0) {
      ++affinity_hits_;
    }
  }
  if (!st.ok()) {
    handoff_link_.erase(handoff_id);  // the caller fails this one now
    (void)receiver_->StartAbort(handoff_id, AbortCode::kLinkFailed, "send failed", now);
    LinkDown(link, "sending a destination failed: " + st.message());
  }
  return st;
}

void PrefillLinks::Abort(uint64_t handoff_id, AbortCode code, const std::string& reason) {
  auto it = handoff_link_.find(handoff_id);
  auto abort = receiver_->StartAbort(handoff_id, code, reason, Now());
  if (abort.ok() && it != handoff_link_.end() && links_[it->second].connection) {
    (void)links_[it->second].connection->Send(abort->Encode());
  }
  if (it != handoff_link_.end()) handoff_link_.erase(it);
}

void PrefillLinks::Handle(const Arrival& a, std::vector<Outcome>& out) {
  Link& link = links_[a.link];
  if (a.closed && !a.timed_out && !a.by_us) {
    // The peer's end of a connection we had given up is gone: what it held is free.
    auto s = std::find(link.suspended.begin(), link.suspended.end(), a.connection_id);
    if (s != link.suspended.end()) {
      receiver_->OnPeerClosed(a.connection_id, Now());
      link.suspended.erase(s);
    }
  }
  if (a.connection_id != link.connection_id || !link.connection) return;  // a connection already given up
  // A peer that stopped answering may still be writing: only a real close proves it is gone.
  if (a.closed && a.refused && link.state == LinkState::kConnecting) {
    // Nothing listens on its address: the engine that had our earlier
    // connections has exited (a live one never stops listening), so none of
    // their writes can land any more.
    for (uint64_t old : link.suspended) receiver_->OnPeerClosed(old, Now());
    link.suspended.clear();
  }
  if (a.closed) {
    return LinkDown(a.link, (a.timed_out ? "the peer stopped answering: " : "the connection closed: ") + a.why,
                    !a.timed_out && !a.by_us);
  }
  link.last_heard = Now();
  ++messages_;
  std::vector<uint8_t> bytes = a.bytes;
  if (link.auth) {
    // After the engine's Hello only its sealed messages count.
    if (Status st = link.auth->Open(&bytes); !st.ok()) {
      TLOG_WARN("tandem decode: closing the connection to prefill engine %s: %s\n", link.address.c_str(),
                st.message().c_str());
      return LinkDown(a.link, "a message failed authentication: " + st.message());
    }
  }
  auto type = PeekType(bytes);
  if (!type.ok() && link.state == LinkState::kConnecting) {
    // Its first message is unreadable (another wire version, or not tandem): a refused handshake.
    const std::string why = "refusing the prefill engine: its handshake is unreadable: " + type.status().message();
    TLOG_INFO("tandem decode: %s: %s\n", link.address.c_str(), why.c_str());
    link.backoff = options_.reconnect_max;
    return LinkDown(a.link, why);
  }
  if (!type.ok()) {
    TLOG_WARN("tandem decode: dropping a malformed message from %s: %s\n", link.address.c_str(),
                 type.status().ToString().c_str());
    return;
  }
  if (*type == MessageType::kHello) {
    if (link.auth) return;  // one Hello per connection
    return OnHello(a.link, bytes);
  }
  if (link.state != LinkState::kUp) return;  // nothing counts before the handshake
  // A handoff's messages count only on the connection it was sent on.
  auto mine = [&](uint64_t id) {
    auto it = handoff_link_.find(id);
    return it != handoff_link_.end() && it->second == a.link;
  };
  // Where write windows are kept, the message's number on its connection:
  // a put into a handoff's pages read after the message that ended it is
  // refused (decode/write_windows.h), and the connection closed.
  const std::optional<uint64_t> number =
      windows_.load() != nullptr ? std::optional<uint64_t>(a.message) : std::nullopt;
  auto wrote_after = [&](const std::string& why) {
    TLOG_WARN("tandem decode: closing the connection to prefill engine %s: %s\n", link.address.c_str(), why.c_str());
    LinkDown(a.link, why);
  };
  if (*type == MessageType::kCommit) {
    auto commit = Commit::Decode(bytes);
    if (!commit.ok()) {
      TLOG_WARN("tandem decode: bad commit from %s: %s\n", link.address.c_str(),
                   commit.status().ToString().c_str());
      return;  // no trustworthy id: that handoff ends at its deadline
    }
    if (!mine(commit->handoff_id)) {
      // Ours but already aborted (quarantined): the commit follows the
      // sender's flush, so it releases the quarantine like an AbortAck.
      auto late = receiver_->OnCommit(*commit, a.connection_id, Now(), number);
      if (late.status().code() == StatusCode::kPermissionDenied) wrote_after(late.status().message());
      return;
    }
    handoff_link_.erase(commit->handoff_id);
    const int64_t mismatches_before = receiver_->stats().digest_mismatches;
    auto ready = receiver_->OnCommit(*commit, a.connection_id, Now(), number);
    Outcome o;
    o.id = commit->handoff_id;
    if (ready.ok()) {
      o.ready.pages = std::move(ready->pages);
      o.ready.first_token = ready->first_token;
      o.ready.cached_tokens = ready->cached_tokens;
      o.ready.compute_us = ready->compute_us;
      o.ready.transfer_us = ready->transfer_us;
      o.ready.queue_us = ready->queue_us;
    } else {
      o.status = ready.status();
      // Bytes damaged on the way (a digest mismatch; the commit came after
      // the sender's flush, so its pages are free again) failed that
      // transfer, not the request: it goes to another engine if one is up.
      // Any other bad commit (another reservation, a layout or model
      // disagreement) is the peer's error and fails the request, visibly.
      if (receiver_->stats().digest_mismatches > mismatches_before) {
        o.retryable = true;
        failed_on_[commit->handoff_id] = a.link;
      }
    }
    const bool wrote_late = ready.status().code() == StatusCode::kPermissionDenied;
    out.push_back(std::move(o));
    if (wrote_late) wrote_after(ready.status().message());
  } else if (*type == MessageType::kAbort) {
    // The prefill side gave up or refused (it stopped writing and flushed
    // first): whether the handoff was open or already quarantined, its pages are free.
    auto abort = Abort::Decode(bytes);
    if (!abort.ok()) return;
    const bool open = mine(abort->handoff_id);
    (void)receiver_->StartAbort(abort->handoff_id, abort->code, abort->reason, Now());
    const bool quiet = receiver_->OnAbortAck(abort->handoff_id, a.connection_id, number);
    if (open) {
      handoff_link_.erase(abort->handoff_id);
      failed_on_[abort->handoff_id] = a.link;
      Outcome o;
      o.id = abort->handoff_id;
      o.status = Status(StatusCode::kAborted, "the prefill engine " + link.address + " failed the handoff (" +
                                                  AbortCodeName(abort->code) + "): " + abort->reason);
      o.retryable = true;
      out.push_back(std::move(o));
    }
    if (!quiet) wrote_after("a put into handoff " + std::to_string(abort->handoff_id) + "'s pages came after its Abort");
  } else if (*type == MessageType::kAbortAck) {
    auto ack = AbortAck::Decode(bytes);
    if (ack.ok() && !receiver_->OnAbortAck(ack->handoff_id, a.connection_id, number)) {
      wrote_after("a put into handoff " + std::to_string(ack->handoff_id) + "'s pages came after its AbortAck");
    }
  }
}

std::vector<PrefillLinks::Outcome> PrefillLinks::Poll() {
  std::deque<Arrival> inbox;
  std::optional<std::vector<std::string>> named;
  {
    MutexLock lock(mu_);
    inbox.swap(inbox_);
    named.swap(named_);
  }
  if (named) ApplyAddresses(*named, Now());
  std::vector<Outcome> out;
  for (const Arrival& a : inbox) Handle(a, out);
  const auto now = Now();
  KeepAlive(now);
  for (uint64_t id : receiver_->Expired(now)) {
    auto it = handoff_link_.find(id);
    const bool open = it != handoff_link_.end();
    if (open) failed_on_[id] = it->second;
    Abort(id, AbortCode::kDeadline, "deadline");
    if (!open) continue;
    Outcome o;
    o.id = id;
    o.status = Status(StatusCode::kDeadlineExceeded, "the handoff did not commit before its deadline");
    o.retryable = true;  // another prefill engine may be faster; the request's own deadline still bounds it
    out.push_back(std::move(o));
  }
  out.insert(out.end(), std::make_move_iterator(ended_.begin()), std::make_move_iterator(ended_.end()));
  ended_.clear();
  if (failed_on_.size() > 4096) failed_on_.clear();  // hints only: never let them pile up
  return out;
}

}  // namespace tandem::decode
