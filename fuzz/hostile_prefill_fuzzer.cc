// libFuzzer target: a hostile prefill engine against a live decode engine over
// real TCP sockets on 127.0.0.1 (issue 26; the prefill side's twin is
// hostile_peer_fuzzer.cc). One decode engine (micro model, a cluster key, its
// links to one address: the harness's) runs for the whole session; it dials
// the harness and reconnects whenever the harness closes. Each input is a
// script for one connection:
//
//   byte 0: bit 1 — answer the decode's Hello properly (so the rest is judged
//           after authentication) or answer with the script alone;
//           bit 2 — seal what follows with the session (when authenticated);
//           bit 4 — submit a request first, so a Destination (a handoff id,
//           reserved pages, a remote key) is open while the script runs.
//   then frames: [kind u8][len u16][len bytes]. By kind & 7:
//     0  the bytes as a message (taken as framed bytes);
//     2  the bytes wrapped in a valid header of type 1 + (kind >> 3) % 6;
//     4  a Commit for the open handoff: first token and digests' bytes from
//        the script, the pages' digest right when kind & 8;
//     6  an Abort (kind & 8: an AbortAck) of the open handoff, or of the id
//        the first 8 bytes name when kind & 16;
//     odd  a put of the bytes into the decode's pool at the offset their first
//        8 bytes name (kind & 8: inside one of the open handoff's pages).
//
// After every input the harness closes and cancels the request; the decode
// engine must end it within 20 s, leave no page reserved and no request
// queued, and dial the harness again, else the target aborts. (The waits of
// one input add up to under 100 s: scripts/fuzz.sh gives libFuzzer 150.)
// Built and run by scripts/fuzz.sh, not by CI.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/layout.h"
#include "common/log.h"
#include "fuzz_support.h"
#include "decode/decode_role.h"
#include "model/numerics.h"
#include "model/cache_spec.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/presets.h"
#include "runtime/engine.h"
#include "transfer/cluster_key.h"
#include "transfer/handshake.h"
#include "transfer/message_auth.h"
#include "transfer/messages.h"
#include "transfer/socket.h"

namespace tandem {
namespace {

using transfer::Clock;
using transfer::Connection;
using namespace std::chrono_literals;

// The harness's listener: the decode engine's latest connection and what
// arrived on it. Bounded waits.
struct Harness {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<Connection> conn;      // the latest accepted
  std::deque<std::vector<uint8_t>> inbox;  // what arrived on it
  bool closed = false;
  transfer::SocketTransport transport;  // last: its threads use the fields above until it is gone

  transfer::ConnectionHandlers Accept(std::shared_ptr<Connection> c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      conn = c;
      inbox.clear();
      closed = false;
      cv.notify_all();
    }
    transfer::ConnectionHandlers h;
    Connection* raw = c.get();
    h.on_message = [this, raw](Connection&, std::vector<uint8_t> m) {
      std::lock_guard<std::mutex> lock(mu);
      if (conn.get() != raw) return;
      inbox.push_back(std::move(m));
      cv.notify_all();
    };
    h.on_close = [this, raw](Connection&, const Status&) {
      std::lock_guard<std::mutex> lock(mu);
      if (conn.get() != raw) return;
      closed = true;
      cv.notify_all();
    };
    return h;
  }
  // The next message on `c` that `want` takes (others are dropped:
  // heartbeats), or nullopt at the deadline, on close, or once `c` is no
  // longer the current connection (the decode redialed: what arrived since
  // is the next input's).
  template <typename Want>
  std::optional<std::vector<uint8_t>> Next(const std::shared_ptr<Connection>& c, std::chrono::milliseconds limit,
                                           Want want) {
    std::unique_lock<std::mutex> lock(mu);
    const auto until = Clock::now() + limit;
    for (;;) {
      if (conn != c) return std::nullopt;
      while (!inbox.empty()) {
        std::vector<uint8_t> m = std::move(inbox.front());
        inbox.pop_front();
        if (want(m)) return m;
      }
      if (closed || !cv.wait_until(lock, until, [&] { return !inbox.empty() || closed || conn != c; })) {
        if (inbox.empty() || conn != c) return std::nullopt;
      }
    }
  }
};

struct World {
  fuzz::MicroModel micro;
  transfer::ClusterKey key;
  std::unique_ptr<Harness> harness;
  std::unique_ptr<Engine> decode;
  std::unique_ptr<CacheLayout> layout;  // the decode pool's
  std::string address;
  int64_t vocab = 0;
};

World& TheWorld() {
  static World* w = [] {
    auto* w = new World;
    log::SetLevel(log::Level::kError);  // the refusals are expected: thousands of them
    fuzz::BuildMicroModel(&w->micro);
    w->vocab = w->micro.model->config().vocab_size;
    w->key = *transfer::ClusterKey::FromSecret("the fuzzer's cluster secret");
    w->harness = std::make_unique<Harness>();
    Harness* h = w->harness.get();
    if (!h->transport.Listen("127.0.0.1:0", [h](std::shared_ptr<Connection> c) { return h->Accept(c); }).ok()) {
      std::abort();
    }
    w->address = "127.0.0.1:" + std::to_string(h->transport.listen_port());
    EngineOptions eo;
    eo.threads = 1;
    eo.cache_tokens = 16 * kPageTokens;
    eo.request_timeout = 10s;  // a request no prefill engine finishes ends here
    auto spec = MakeCacheSpec(w->micro.model->config(), eo.attention);
    w->layout = std::make_unique<CacheLayout>(spec->registry, int(w->micro.model->config().n_layers),
                                              (eo.cache_tokens + kPageTokens - 1) / kPageTokens);
    const CacheLayout& layout = *w->layout;
    decode::PrefillLinksOptions ro;
    ro.addresses = {w->address};
    ro.pool_bytes = size_t(layout.TotalBytes());
    ro.layout_fingerprint = layout.Fingerprint() + ";" + AttentionFingerprint(spec->attention);
    ro.weights_identity = WeightsIdentity(*w->micro.model);
    ro.numerics = HandshakeNumerics();
    ro.transport = transfer::TransportKind::kTcp;
    ro.peer_timeout = 2s;
    ro.heartbeat_interval = 400ms;
    ro.reconnect_min = 1ms;  // the harness closes after every input: come back at once
    ro.reconnect_max = 20ms;
    ro.startup_wait = 1ms;  // the harness answers per input, not at start-up
    ro.receiver.vocab_size = w->vocab;
    ro.receiver.deadlines.waiting_for_input = 2s;
    ro.cluster_key = w->key;
    auto role = decode::DecodeRole::Start(decode::DecodeOptions{}, std::move(ro));
    if (!role.ok()) std::abort();
    w->decode = std::move(Engine::Create(*w->micro.model, eo, std::move(role).value())).value();
    return w;
  }();
  return *w;
}

bool IsType(const std::vector<uint8_t>& m, MessageType t) {
  auto got = PeekType(m);
  return got.ok() && *got == t;
}

}  // namespace
}  // namespace tandem

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size < 1) return 0;
  World& w = TheWorld();
  Harness& h = *w.harness;
  const uint8_t mode = data[0];
  // The decode engine dials in (at once after the last input's close).
  std::shared_ptr<Connection> conn;
  {
    std::unique_lock<std::mutex> lock(h.mu);
    if (!h.cv.wait_for(lock, 20s, [&] { return h.conn && !h.closed; })) std::abort();  // it stopped dialing
    conn = h.conn;
  }
  auto hello_bytes = h.Next(conn, 10s, [](const std::vector<uint8_t>& m) { return IsType(m, MessageType::kHello); });
  if (!hello_bytes) {
    std::lock_guard<std::mutex> lock(h.mu);
    if (h.conn == conn && !h.closed) std::abort();  // it dialed and said nothing for 10 s
    if (h.conn == conn) h.conn = nullptr;
    return 0;  // it closed (or redialed) first: the next input takes the next connection
  }
  auto theirs = Hello::Decode(*hello_bytes);
  if (!theirs.ok() || !transfer::CheckDecodeHello(w.key, *theirs, nullptr, w.address).ok()) std::abort();
  std::shared_ptr<transfer::MessageAuth> seal;
  std::shared_ptr<RequestHandle> request;
  std::optional<Destination> open;
  if (mode & 2) {
    Hello mine{"prefill", theirs->layout_fingerprint, theirs->weights_identity, transfer::NewInstanceId(),
               theirs->instance_id, {}, {}, "", theirs->numerics};
    const std::vector<uint8_t> my_nonce = transfer::SignPrefillHello(w.key, *theirs, &mine);
    (void)conn->Send(mine.Encode());
    auto session = std::make_shared<transfer::MessageAuth>(w.key, theirs->nonce, my_nonce, /*decode_side=*/false);
    if (mode & 4) seal = session;
    if (mode & 8) {
      // Once the decode engine has taken the Hello (its link is up), a request.
      const auto up_by = Clock::now() + 5s;
      while (!w.decode->Healthy() && Clock::now() < up_by) std::this_thread::sleep_for(1ms);  // bounded poll
      RequestSpec spec;
      for (int i = 0; i < 40; ++i) spec.prompt.push_back(int32_t((i * 7 + 3) % w.vocab));
      spec.max_tokens = 4;
      spec.ignore_eos = true;
      auto submitted = w.decode->Submit(spec);
      if (submitted.ok()) request = *submitted;
      std::vector<uint8_t> plain;
      auto d = h.Next(conn, 5s, [&](const std::vector<uint8_t>& m) {
        plain = m;
        return session->Open(&plain).ok() && IsType(plain, MessageType::kDestination);
      });
      if (d) {
        if (auto dest = Destination::Decode(plain); dest.ok()) open = *dest;
      }
    }
  }
  const uint64_t handoff = open ? open->handoff_id : 0;
  const transfer::RemoteKey remote{open ? open->remote_key : std::vector<uint8_t>{}, uint64_t(1) << 40};
  std::vector<std::vector<uint8_t>> put_sources;  // alive until the connection is released (Put's REQUIRES)
  auto send = [&](std::vector<uint8_t> m) { (void)(seal ? seal->SealAndSend(*conn, std::move(m)) : conn->Send(std::move(m))); };
  for (size_t at = 1; at + 3 <= size;) {
    const uint8_t kind = data[at];
    const size_t len = std::min<size_t>(size - at - 3, size_t(data[at + 1]) | size_t(data[at + 2]) << 8);
    std::vector<uint8_t> bytes(data + at + 3, data + at + 3 + len);
    at += 3 + len;
    uint64_t named = 0;
    if (bytes.size() >= 8) std::memcpy(&named, bytes.data(), 8);
    if (kind & 1) {
      if (!open || open->remote_key.empty()) continue;
      uint64_t offset = named;
      if (kind & 8 && !open->pages.empty()) {  // somewhere in one of the handoff's own pages
        const CacheLayout& l = *w.layout;
        const CacheBufferId b = CacheBufferId(named % uint64_t(l.n_buffers()));
        const int layer = int((named >> 8) % uint64_t(l.n_layers()));
        const int32_t page = open->pages[size_t(named >> 16) % open->pages.size()].page;
        offset = uint64_t(l.SegmentBase(b, layer) + page * l.page_stride(b)) + (named >> 24) % uint64_t(l.page_stride(b));
      }
      put_sources.push_back(std::move(bytes));
      (void)conn->Put(put_sources.back().data(), put_sources.back().size(), remote, offset % (uint64_t(1) << 30));
      continue;
    }
    switch (kind & 7) {
      case 0: send(std::move(bytes)); break;
      case 2: {
        send(fuzz::WithHeader(uint16_t(1 + (kind >> 3) % 6), bytes));
        break;
      }
      case 4: {
        Commit c;
        c.handoff_id = handoff;
        c.pages_digest = (kind & 8) && open ? PagesDigest(open->pages) : named;
        c.first_token = bytes.size() >= 12 ? int32_t(bytes[8] | bytes[9] << 8 | bytes[10] << 16 | bytes[11] << 24) : 0;
        for (size_t i = 12; i + 9 <= bytes.size() && c.digests.size() < 8; i += 9) {
          BufferDigest b;
          b.name = std::string(1, char('a' + bytes[i] % 4));
          std::memcpy(&b.xxh3, bytes.data() + i + 1, 8);
          c.digests.push_back(b);
        }
        send(c.Encode());
        break;
      }
      case 6: {
        const uint64_t id = (kind & 16) ? named : handoff;
        if (kind & 8) {
          send(AbortAck{id}.Encode());
        } else {
          send(Abort{id, AbortCode::kCancelled, std::string(bytes.begin(), bytes.end())}.Encode());
        }
        break;
      }
    }
  }
  (void)conn->Flush(Clock::now() + 200ms);
  conn->Close();
  if (!conn->WaitReleased(Clock::now() + 10s)) std::abort();
  {
    std::lock_guard<std::mutex> lock(h.mu);
    if (h.conn == conn) h.conn = nullptr;  // the next input waits for the decode's next dial
  }
  // The request ends (a handoff that lost its link is retried on the next
  // one: cancelled here, which must still end it), and nothing is left behind.
  if (request) {
    request->Cancel();
    StreamEvent ev;
    bool ended = false;
    const auto until = Clock::now() + 20s;
    while (!ended && Clock::now() < until && request->Next(&ev, 20s)) ended = ev.kind != StreamEvent::Kind::kText;
    if (!ended) std::abort();  // a request a hostile prefill engine held past every deadline
  }
  const auto until = Clock::now() + 20s;
  for (;;) {
    const EngineStats s = w.decode->Stats();
    if (s.running == 0 && s.waiting == 0 && s.pages.reserved == 0) break;
    if (Clock::now() > until) std::abort();  // a reservation or a request outlived its handoff
    std::this_thread::sleep_for(1ms);  // bounded poll of the published stats
  }
  return 0;
}
