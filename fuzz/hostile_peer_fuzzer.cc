// libFuzzer target: a hostile peer against a live prefill engine over real
// TCP sockets on 127.0.0.1 (issue 26). One prefill engine (micro model, a
// cluster key, the TCP listener's gate) runs for the whole session; each
// input is a script:
//
//   byte 0: bit 1 — first complete a real, keyed handshake (so the rest is
//           judged after authentication) or speak unauthenticated;
//           bit 2 — seal what follows with the session (when authenticated).
//   then frames: [kind u8][len u16][len bytes] — kind 0: a message (taken
//   as framed bytes, or wrapped in a valid header of type kind>>1 when its
//   low bit is set), kind 1: a put into whatever region offset the bytes name.
//
// The engine must never crash or stop serving: after every input a real
// decode handshake is made and answered, else the target aborts. (The decode
// side's answers to a hostile prefill engine are tested, not fuzzed:
// tests/e2e/hostile_peers_test.cc, tests/decode/write_windows_test.cc.)
// Built and run by scripts/fuzz.sh, not by CI.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/log.h"
#include "fuzz_support.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/presets.h"
#include "prefill/prefill_engine.h"
#include "transfer/cluster_key.h"
#include "transfer/handshake.h"
#include "transfer/message_auth.h"
#include "transfer/messages.h"
#include "transfer/socket.h"

namespace tandem {
namespace {

using transfer::Clock;
using transfer::Connection;

// What arrives on one harness connection, bounded waits.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<uint8_t>> messages;
  bool closed = false;
  transfer::ConnectionHandlers Handlers() {
    transfer::ConnectionHandlers h;
    h.on_message = [this](Connection&, std::vector<uint8_t> m) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(std::move(m));
      cv.notify_all();
    };
    h.on_close = [this](Connection&, const Status&) {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
      cv.notify_all();
    };
    return h;
  }
  bool WaitMessage(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, [&] { return !messages.empty() || closed; }) && !messages.empty();
  }
  // The first Hello to arrive (heartbeats may come before it), or nullopt.
  std::optional<std::vector<uint8_t>> WaitHello(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    std::optional<std::vector<uint8_t>> hello;
    cv.wait_for(lock, limit, [&] {
      for (const auto& m : messages) {
        if (auto t = PeekType(m); t.ok() && *t == MessageType::kHello) return hello = m, true;
      }
      return closed;
    });
    return hello;
  }
};

struct World {
  fuzz::MicroModel micro;
  transfer::ClusterKey key;
  std::unique_ptr<transfer::SocketTransport> prefill_transport;
  std::unique_ptr<PrefillEngine> prefill;
  std::string address;
  Hello engine_hello;  // its layout and weights, for real handshakes
};

World& TheWorld() {
  static World* w = [] {
    auto* w = new World;
    log::SetLevel(log::Level::kError);  // the refusals are expected: thousands of them
    fuzz::BuildMicroModel(&w->micro);
    w->key = *transfer::ClusterKey::FromSecret("the fuzzer's cluster secret");
    PrefillOptions o;
    o.cluster_key = w->key;
    o.engine.threads = 1;
    o.engine.cache_tokens = 16 * kPageTokens;
    w->prefill = std::move(PrefillEngine::Create(*w->micro.model, o)).value();
    w->prefill_transport = std::make_unique<transfer::SocketTransport>();
    PrefillEngine* engine = w->prefill.get();
    transfer::FirstMessageGate gate;
    gate.check = [engine](std::span<const uint8_t> m, std::vector<uint8_t>* reply) {
      return engine->CheckFirstMessage(m, reply);
    };
    (void)w->prefill_transport->SetFirstMessageGate(std::move(gate));
    if (!w->prefill_transport->Listen("127.0.0.1:0", [engine](std::shared_ptr<Connection> c) {
          engine->OnAccept(c);
          transfer::ConnectionHandlers h;
          std::weak_ptr<Connection> weak = c;
          h.on_message = [engine, weak](Connection&, std::vector<uint8_t> m) {
            if (auto conn = weak.lock()) engine->OnMessage(conn, m);
          };
          h.on_close = [engine](Connection& raw, const Status&) { engine->OnClose(raw.id()); };
          return h;
        }).ok()) {
      std::abort();
    }
    w->address = "127.0.0.1:" + std::to_string(w->prefill_transport->listen_port());
    engine->SetListenAddress(w->address);
    // Learn the engine's Hello from a refused probe.
    Inbox in;  // before the transport: its threads write here until it is gone
    transfer::SocketTransport probe;
    auto c = probe.Connect(w->address, in.Handlers());
    (void)(*c)->Send(Hello{"decode", "-", "-", 1, 0, {}, {}, ""}.Encode());
    auto first = in.WaitHello(std::chrono::seconds(10));
    if (!first) std::abort();
    w->engine_hello = *Hello::Decode(*first);
    return w;
  }();
  return *w;
}

// A real decode Hello for the engine; the accepted connection's session.
struct Session {
  std::shared_ptr<Connection> conn;
  std::shared_ptr<transfer::MessageAuth> auth;
};

std::optional<Session> Handshake(World& w, transfer::SocketTransport& t, Inbox& in) {
  Hello h{"decode", w.engine_hello.layout_fingerprint, w.engine_hello.weights_identity, transfer::NewInstanceId(), 0,
          {}, {}, w.address, w.engine_hello.numerics};
  const std::vector<uint8_t> nonce = transfer::SignDecodeHello(w.key, &h);
  auto c = t.Connect(w.address, in.Handlers());
  if (!c.ok() || !(*c)->Send(h.Encode()).ok()) return std::nullopt;
  auto first = in.WaitHello(std::chrono::seconds(10));
  if (!first) return std::nullopt;
  auto theirs = Hello::Decode(*first);
  if (!theirs.ok() || !transfer::CheckPrefillHello(w.key, nonce, *theirs).ok()) return std::nullopt;
  return Session{*c, std::make_shared<transfer::MessageAuth>(w.key, nonce, theirs->nonce, true)};
}

}  // namespace
}  // namespace tandem

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size < 1) return 0;
  World& w = TheWorld();
  const uint8_t mode = data[0];
  Inbox in;  // before the transport: its threads write here until it is gone
  transfer::SocketTransport t;
  std::shared_ptr<Connection> conn;
  std::shared_ptr<transfer::MessageAuth> seal;
  if (mode & 2) {
    auto s = Handshake(w, t, in);
    if (!s) std::abort();  // the engine stopped answering real peers
    conn = s->conn;
    if (mode & 4) seal = s->auth;
  } else {
    auto c = t.Connect(w.address, in.Handlers());
    if (!c.ok()) return 0;
    conn = *c;
  }
  auto region = t.AllocateRegion(4096);  // a key shape the engine may be handed
  // A put's source stays allocated until the connection is released (Put's REQUIRES).
  std::vector<std::vector<uint8_t>> put_sources;
  for (size_t at = 1; at + 3 <= size;) {
    const uint8_t kind = data[at];
    const size_t len = std::min<size_t>(size - at - 3, size_t(data[at + 1]) | size_t(data[at + 2]) << 8);
    std::vector<uint8_t> bytes(data + at + 3, data + at + 3 + len);
    at += 3 + len;
    if ((kind & 1) == 0) {
      if (kind & 2) {  // wrapped in a valid header of a chosen type
        bytes = fuzz::WithHeader(uint16_t(1 + (kind >> 2) % 6), bytes);
      }
      (void)(seal ? seal->SealAndSend(*conn, std::move(bytes)) : conn->Send(std::move(bytes)));
    } else if (region.ok() && bytes.size() >= 8) {
      uint64_t offset = 0;
      std::memcpy(&offset, bytes.data(), 8);
      put_sources.push_back(std::move(bytes));
      (void)conn->Put(put_sources.back().data(), put_sources.back().size(), region->key, offset % 8192);
    }
  }
  (void)conn->Flush(Clock::now() + std::chrono::milliseconds(200));
  conn->Close();
  if (!conn->WaitReleased(Clock::now() + std::chrono::seconds(10))) std::abort();
  // Still serving: a real handshake is answered.
  Inbox check_in;
  transfer::SocketTransport check;
  if (!Handshake(w, check, check_in)) std::abort();
  return 0;
}
