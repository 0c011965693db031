#include "prefill/prefill_server.h"

#include "common/log.h"

namespace tandem {

StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Create(const Model& model, PrefillOptions options,
                                                               std::unique_ptr<transfer::Transport> transport) {
  if (transport == nullptr) return InvalidArgument("a prefill server needs a transport");
  TANDEM_ASSIGN_OR_RETURN(auto engine, PrefillEngine::Create(model, std::move(options)));
  return std::unique_ptr<PrefillServer>(new PrefillServer(std::move(engine), std::move(transport)));
}

PrefillServer::~PrefillServer() {
  Stop();
  transport_.reset();  // its threads are gone before the map and the engine
}

void PrefillServer::Stop() { engine_->Stop(); }  // no thread of it touches a connection once the transport goes

std::shared_ptr<transfer::Connection> PrefillServer::Wrapped(transfer::Connection& raw) {
  MutexLock lock(mu_);
  auto it = wrapped_.find(&raw);
  return it == wrapped_.end() ? nullptr : it->second;
}

Status PrefillServer::Listen(const std::string& address, Wrap wrap) {
  // Nothing is spent on a peer before its Hello proves the key (no thread, a
  // 64 KiB message at most, 5 s to say it, 128 waiting at once).
  transfer::FirstMessageGate gate;
  gate.check = [e = engine_.get()](std::span<const uint8_t> m, std::vector<uint8_t>* reply) {
    return e->CheckFirstMessage(m, reply);
  };
  if (Status gated = transport_->SetFirstMessageGate(std::move(gate)); !gated.ok()) {
    TLOG_WARN("tandem prefill: %s: connections that never authenticate cost a thread each\n",
              gated.message().c_str());
  }
  TANDEM_RETURN_IF_ERROR(transport_->Listen(address, [this, wrap](std::shared_ptr<transfer::Connection> c) {
    std::shared_ptr<transfer::Connection> use = wrap ? wrap(c) : c;
    {
      MutexLock lock(mu_);
      wrapped_[c.get()] = use;
    }
    engine_->OnAccept(use);
    transfer::ConnectionHandlers h;
    h.on_message = [this](transfer::Connection& raw, std::vector<uint8_t> m) {
      if (std::shared_ptr<transfer::Connection> conn = Wrapped(raw)) engine_->OnMessage(conn, m);
    };
    h.on_close = [this](transfer::Connection& raw, const Status&) {
      std::shared_ptr<transfer::Connection> conn;
      {
        MutexLock lock(mu_);
        auto it = wrapped_.find(&raw);
        if (it == wrapped_.end()) return;
        conn = std::move(it->second);
        wrapped_.erase(it);
      }
      engine_->OnClose(raw.id());
      conn->Close();  // releases the endpoint (a no-op when it is already closed)
    };
    return h;
  }));
  // A host and port: a decode Hello meant for another engine is refused (a
  // loopback name, which has no port, is not checked).
  if (const size_t colon = address.rfind(':'); port() >= 0 && colon != std::string::npos) {
    engine_->SetListenAddress(address.substr(0, colon) + ":" + std::to_string(port()));
  }
  return Status::Ok();
}

}  // namespace tandem
