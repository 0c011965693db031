#include "decode/remote_prefill.h"

#include <cstdio>

#include "transfer/handshake.h"

namespace tandem {

using transfer::Clock;

StatusOr<std::unique_ptr<RemotePrefill>> RemotePrefill::Connect(const std::vector<std::string>& addresses,
                                                                 size_t pool_bytes, std::string layout_fingerprint) {
  if (addresses.empty()) return InvalidArgument("no prefill engine address");
  auto r = std::unique_ptr<RemotePrefill>(new RemotePrefill());
  r->fingerprint_ = std::move(layout_fingerprint);
  TANDEM_ASSIGN_OR_RETURN(r->transport_, transfer::UcxTransport::Create());
  TANDEM_ASSIGN_OR_RETURN(r->region_, r->transport_->AllocateRegion(pool_bytes));
  RemotePrefill* self = r.get();
  for (size_t i = 0; i < addresses.size(); ++i) {
    transfer::ConnectionHandlers h;
    h.on_message = [self, i](transfer::Connection&, std::vector<uint8_t> m) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->inbox_.push_back({i, std::move(m)});
    };
    h.on_close = [self, i](transfer::Connection&, const Status&) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->inbox_.push_back({i, {}, true});
    };
    Link link;
    link.address = addresses[i];
    auto conn = r->transport_->Connect(addresses[i], h);
    if (!conn.ok()) return Status(conn.status().code(), "prefill engine " + addresses[i] + ": " + conn.status().message());
    link.connection = std::move(conn).value();
    TANDEM_RETURN_IF_ERROR(link.connection->Send(Hello{"decode", r->fingerprint_, 0}.Encode()));
    r->links_.push_back(std::move(link));
  }
  return r;
}

RemotePrefill::~RemotePrefill() {
  receiver_.reset();  // releases what it holds before the connections go
  for (Link& l : links_) l.connection->Close();
  links_.clear();
  // The transport's threads run our handlers (which touch inbox_) until it is
  // destroyed: destroy it while every other member is still alive.
  transport_.reset();
}

void RemotePrefill::Attach(PagePool& pool, PrefixIndex* index, transfer::ReceiverOptions options) {
  receiver_ = std::make_unique<transfer::HandoffReceiver>(pool, region_.key, index, options);
}

bool RemotePrefill::healthy() const {
  for (const Link& l : links_) {
    if (l.healthy) return true;
  }
  return false;
}

std::string RemotePrefill::problem() const {
  std::string out;
  for (const Link& l : links_) {
    if (!l.healthy) out += (out.empty() ? "" : "; ") + l.address + ": " + l.problem;
  }
  return out;
}

Status RemotePrefill::Start(uint64_t handoff_id, const std::vector<int32_t>& tokens, const SamplingParams& sampling) {
  size_t link = links_.size();
  for (size_t k = 0; k < links_.size(); ++k) {
    const size_t i = (next_link_ + k) % links_.size();
    if (links_[i].healthy) {
      link = i;
      break;
    }
  }
  if (link == links_.size()) return Unavailable("no prefill engine is available: " + problem());
  TANDEM_ASSIGN_OR_RETURN(Destination d, receiver_->Begin(handoff_id, tokens, link, Clock::now()));
  next_link_ = link + 1;
  d.sampling = sampling;
  handoff_link_[handoff_id] = link;
  Status st = links_[link].connection->Send(d.Encode());
  if (!st.ok()) {
    handoff_link_.erase(handoff_id);  // the caller fails this one now
    (void)receiver_->StartAbort(handoff_id, "send failed", Clock::now());
    LinkDown(link, st.ToString());
  }
  return st;
}

void RemotePrefill::Abort(uint64_t handoff_id, const std::string& reason) {
  auto it = handoff_link_.find(handoff_id);
  auto abort = receiver_->StartAbort(handoff_id, reason, Clock::now());
  if (abort.ok() && it != handoff_link_.end()) (void)links_[it->second].connection->Send(abort->Encode());
  if (it != handoff_link_.end()) handoff_link_.erase(it);
}

// A link is gone: nothing of it can land any more, so its pages are freed and
// its open handoffs fail (the engine fails their requests).
void RemotePrefill::LinkDown(size_t link, const std::string& why) {
  if (links_[link].healthy) {
    links_[link].healthy = false;
    links_[link].problem = why;
    std::fprintf(stderr, "tandem decode: prefill engine %s unavailable: %s\n", links_[link].address.c_str(), why.c_str());
  }
  receiver_->OnPeerClosed(link, Clock::now());
  for (auto it = handoff_link_.begin(); it != handoff_link_.end();) {
    if (it->second != link) {
      ++it;
      continue;
    }
    Outcome o;
    o.handoff_id = it->first;
    o.status = Unavailable("prefill engine " + links_[link].address + " unavailable: " + why);
    failed_.push_back(std::move(o));
    it = handoff_link_.erase(it);
  }
}

std::vector<RemotePrefill::Outcome> RemotePrefill::Poll() {
  std::deque<Arrival> inbox;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
  }
  std::vector<Outcome> out;
  for (Arrival& a : inbox) {
    if (a.closed) {
      LinkDown(a.link, "the connection closed");
      continue;
    }
    auto type = PeekType(a.bytes);
    if (!type.ok()) continue;
    if (*type == MessageType::kHello) {
      auto hello = Hello::Decode(a.bytes);
      Status st = hello.ok() ? transfer::CheckHello(Hello{"decode", fingerprint_, 0}, *hello) : hello.status();
      if (!st.ok()) {
        std::fprintf(stderr, "tandem decode: refusing the prefill engine %s: %s\n", links_[a.link].address.c_str(),
                     st.message().c_str());
        LinkDown(a.link, st.message());
        links_[a.link].connection->Close();
      }
    } else if (*type == MessageType::kCommit) {
      auto commit = Commit::Decode(a.bytes);
      if (!commit.ok()) continue;
      handoff_link_.erase(commit->handoff_id);
      auto ready = receiver_->OnCommit(*commit, Clock::now());
      Outcome o;
      o.handoff_id = commit->handoff_id;
      if (ready.ok()) {
        o.ready = std::move(ready).value();
      } else {
        o.status = ready.status();
      }
      out.push_back(std::move(o));
    } else if (*type == MessageType::kAbort) {
      // The prefill side gave up (it stopped writing first): the handoff fails.
      auto abort = Abort::Decode(a.bytes);
      if (!abort.ok()) continue;
      handoff_link_.erase(abort->handoff_id);
      // The sender stops and flushes before it says so: whether the handoff
      // was open or we had already aborted it (quarantined), its pages are free.
      (void)receiver_->StartAbort(abort->handoff_id, abort->reason, Clock::now());
      receiver_->OnAbortAck(abort->handoff_id);
      Outcome o;
      o.handoff_id = abort->handoff_id;
      o.status = Status(StatusCode::kAborted, "the prefill engine failed the handoff: " + abort->reason);
      out.push_back(std::move(o));
    } else if (*type == MessageType::kAbortAck) {
      if (auto ack = AbortAck::Decode(a.bytes); ack.ok()) receiver_->OnAbortAck(ack->handoff_id);
    }
  }
  for (uint64_t id : receiver_->Expired(Clock::now())) Abort(id, "deadline");
  out.insert(out.end(), std::make_move_iterator(failed_.begin()), std::make_move_iterator(failed_.end()));
  failed_.clear();
  return out;
}

}  // namespace tandem
