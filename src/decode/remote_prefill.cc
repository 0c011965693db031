#include "decode/remote_prefill.h"

#include <cstdio>

#include "transfer/handshake.h"

namespace tandem {

using transfer::Clock;

StatusOr<std::unique_ptr<RemotePrefill>> RemotePrefill::Connect(const std::string& address, size_t pool_bytes,
                                                                 std::string layout_fingerprint) {
  auto r = std::unique_ptr<RemotePrefill>(new RemotePrefill());
  r->fingerprint_ = std::move(layout_fingerprint);
  TANDEM_ASSIGN_OR_RETURN(r->transport_, transfer::UcxTransport::Create());
  TANDEM_ASSIGN_OR_RETURN(r->region_, r->transport_->AllocateRegion(pool_bytes));
  transfer::ConnectionHandlers h;
  RemotePrefill* self = r.get();
  h.on_message = [self](transfer::Connection&, std::vector<uint8_t> m) {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->inbox_.push_back(std::move(m));
  };
  h.on_close = [self](transfer::Connection&, const Status&) {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->closed_ = true;
  };
  TANDEM_ASSIGN_OR_RETURN(r->connection_, r->transport_->Connect(address, h));
  TANDEM_RETURN_IF_ERROR(r->connection_->Send(Hello{"decode", r->fingerprint_, 0}.Encode()));
  return r;
}

RemotePrefill::~RemotePrefill() {
  receiver_.reset();  // releases what it holds before the connection goes
  if (connection_) connection_->Close();
}

void RemotePrefill::Attach(PagePool& pool, PrefixIndex* index, transfer::ReceiverOptions options) {
  receiver_ = std::make_unique<transfer::HandoffReceiver>(pool, region_.key, index, options);
}

Status RemotePrefill::Start(uint64_t handoff_id, const std::vector<int32_t>& tokens, const SamplingParams& sampling) {
  if (!healthy_) return Unavailable("prefill link is down: " + problem_);
  TANDEM_ASSIGN_OR_RETURN(Destination d, receiver_->Begin(handoff_id, tokens, connection_->id(), Clock::now()));
  d.sampling = sampling;
  Status st = connection_->Send(d.Encode());
  if (!st.ok()) {
    auto abort = receiver_->StartAbort(handoff_id, "send failed", Clock::now());
    (void)abort;
    receiver_->OnPeerClosed(connection_->id(), Clock::now());
    healthy_ = false;
    problem_ = st.ToString();
  }
  return st;
}

void RemotePrefill::Abort(uint64_t handoff_id, const std::string& reason) {
  auto abort = receiver_->StartAbort(handoff_id, reason, Clock::now());
  if (abort.ok()) (void)connection_->Send(abort->Encode());
}

std::vector<RemotePrefill::Outcome> RemotePrefill::Poll() {
  std::deque<std::vector<uint8_t>> inbox;
  bool closed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    closed = closed_;
  }
  std::vector<Outcome> out;
  for (auto& bytes : inbox) {
    auto type = PeekType(bytes);
    if (!type.ok()) continue;
    if (*type == MessageType::kHello) {
      auto hello = Hello::Decode(bytes);
      Status st = hello.ok() ? transfer::CheckHello(Hello{"decode", fingerprint_, 0}, *hello) : hello.status();
      if (!st.ok()) {
        healthy_ = false;
        problem_ = st.message();
        std::fprintf(stderr, "tandem decode: refusing the prefill engine: %s\n", st.message().c_str());
        connection_->Close();
      }
      greeted_ = st.ok();
    } else if (*type == MessageType::kCommit) {
      auto commit = Commit::Decode(bytes);
      if (!commit.ok()) continue;
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
      auto abort = Abort::Decode(bytes);
      if (!abort.ok()) continue;
      if (receiver_->StartAbort(abort->handoff_id, abort->reason, Clock::now()).ok()) {
        receiver_->OnAbortAck(abort->handoff_id);
      }
      Outcome o;
      o.handoff_id = abort->handoff_id;
      o.status = Status(StatusCode::kAborted, "the prefill engine failed the handoff: " + abort->reason);
      out.push_back(std::move(o));
    } else if (*type == MessageType::kAbortAck) {
      if (auto ack = AbortAck::Decode(bytes); ack.ok()) receiver_->OnAbortAck(ack->handoff_id);
    }
  }
  if (closed && healthy_) {
    healthy_ = false;
    problem_ = "the connection to the prefill engine closed";
  }
  if (!healthy_ || closed) receiver_->OnPeerClosed(connection_->id(), Clock::now());
  for (uint64_t id : receiver_->Expired(Clock::now())) Abort(id, "deadline");
  return out;
}

}  // namespace tandem
