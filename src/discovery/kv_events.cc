#include "discovery/kv_events.h"

#include <zmq.h>

#include <chrono>
#include <unordered_map>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/env.h"
#include "common/log.h"
#include "discovery/kv_events_wire.h"

namespace tandem::discovery {
namespace {

constexpr size_t kMaxEventsPerBatch = 4096;
constexpr size_t kMaxItemsPerBatch = size_t(1) << 18;  // keys and tokens of one batch: at most 2.3 MB encoded
constexpr size_t kMaxHeldItems = size_t(1) << 22;      // keys of batches held while a snapshot comes
constexpr auto kSnapshotInterval = std::chrono::milliseconds(250);  // at most 4 snapshots a second
constexpr size_t kMaxQueuedItems = size_t(1) << 22;  // keys and tokens waiting for the publisher thread
constexpr int64_t kMaxMessageBytes = int64_t(4) << 20;  // a batch's bound, with room
// Messages a subscriber's socket holds unread, per engine followed (events,
// and a snapshot's batches): with the size bound, at most 64 MiB an engine
// however far behind the subscriber falls (ZeroMQ drops the rest: a gap, then
// a snapshot).
constexpr int kReceiveQueue = 16;
// What a publisher queues for one subscriber that does not read: a gap, then
// a snapshot, heals what it drops.
constexpr int kSendQueue = 64;
// Engines one subscriber follows: each is a socket (two while its snapshot
// comes), under ZeroMQ's 1,023 a context and the process's descriptors.
constexpr size_t kMaxSources = 256;
constexpr size_t kMaxHeldBatches = 4096;
constexpr auto kSnapshotDeadline = std::chrono::seconds(5);
const char* const kZapEndpoint = "inproc://zeromq.zap.01";

double Now() {
  return std::chrono::duration<double>(Env::Default().WallNow().time_since_epoch()).count();
}

std::string Port(const std::string& last_endpoint) { return last_endpoint.substr(last_endpoint.rfind(':') + 1); }

}  // namespace

StatusOr<KvCurveKeys> DeriveKvCurveKeys(const std::vector<uint8_t>& secret) {
  KvCurveKeys k;
  if (secret.empty()) return k;
  if (secret.size() != 32) return InvalidArgument("a KV events key is derived from 32 bytes");
  char z85[41] = {0}, pub[41] = {0};
  if (zmq_z85_encode(z85, secret.data(), secret.size()) == nullptr) return Internal("z85 encoding failed");
  if (zmq_curve_public(pub, z85) != 0) return Unavailable("this ZeroMQ has no CURVE security (built without libsodium)");
  k.secret_z85 = z85;
  k.public_z85 = pub;
  return k;
}

// ---------------------------------------------------------------- publisher

struct KvEventPublisher::Impl {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t snapshot{context, zmq::socket_type::router};
  std::unique_ptr<zmq::socket_t> zap;  // with CURVE keys
  std::string client_public;           // the one client key admitted (32 bytes)
  struct Page {
    bool has_parent = false;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
  };
  std::unordered_map<uint64_t, Page> mirror;  // what the index holds, as published
};

KvEventPublisher::KvEventPublisher(KvPublisherOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(KvPublisherOptions options) {
  auto p = std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(options)));
  Impl& i = *p->impl_;
  const KvPublisherOptions& o = p->options_;
  try {
    for (zmq::socket_t* s : {&i.pub, &i.snapshot}) {
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
      if (o.keys.enabled()) {
        s->set(zmq::sockopt::zap_domain, "tandem");
        s->set(zmq::sockopt::curve_server, 1);
        s->set(zmq::sockopt::curve_secretkey, o.keys.secret_z85);
      }
    }
    i.pub.set(zmq::sockopt::sndhwm, kSendQueue);
    i.snapshot.set(zmq::sockopt::sndhwm, kSendQueue);
    if (o.keys.enabled()) {
      i.zap = std::make_unique<zmq::socket_t>(i.context, zmq::socket_type::rep);
      i.zap->bind(kZapEndpoint);  // before any CURVE socket binds: no handshake is ever unchecked
      i.client_public.resize(32);
      zmq_z85_decode(reinterpret_cast<uint8_t*>(i.client_public.data()), o.keys.public_z85.c_str());
    }
    i.pub.bind("tcp://" + o.host + ":" + (o.port > 0 ? std::to_string(o.port) : "*"));
    i.snapshot.bind("tcp://" + o.host + ":" + (o.port > 0 ? std::to_string(o.port + 1) : "*"));
    const std::string host = o.advertise.empty() ? o.host : o.advertise;
    p->events_endpoint_ = "tcp://" + host + ":" + Port(i.pub.get(zmq::sockopt::last_endpoint));
    p->snapshot_endpoint_ = "tcp://" + host + ":" + Port(i.snapshot.get(zmq::sockopt::last_endpoint));
  } catch (const zmq::error_t& e) {
    return Unavailable(std::string("KV events cannot listen on ") + o.host + ": " + e.what());
  }
  p->thread_ = std::thread([raw = p.get()] {
    try {
      raw->Run();
    } catch (const std::exception& e) {  // never std::terminate: the engine serves on without its events
      TLOG_ERROR("tandem kv events: the publisher stopped: %s\n", e.what());
    }
  });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::Publish(PrefixIndex::Event event) {
  MutexLock lock(mu_);
  const size_t items = event.keys.size() + event.tokens.size() + 1;
  if (queued_items_ + items > kMaxQueuedItems) {
    // The publisher thread is far behind: drop what waits, and tell everyone
    // to forget this engine's cache (a hint lost, never a wrong one).
    queue_.clear();
    queued_items_ = 0;
    overflowed_ = true;
    return;
  }
  queued_items_ += items;
  queue_.push_back(std::move(event));
}

void KvEventPublisher::Run() {
  Impl& i = *impl_;
  auto next_snapshot = Env::Default().Now();
  // Batches of at most kMaxEventsPerBatch events and kMaxItemsPerBatch keys
  // and tokens (a single event larger than that goes alone).
  auto split = [](std::vector<KvEvent>& events) {
    std::vector<std::vector<KvEvent>> batches;
    size_t items = 0;
    for (KvEvent& e : events) {
      const size_t n = e.keys.size() + e.tokens.size() + 1;
      if (batches.empty() || batches.back().size() == kMaxEventsPerBatch || items + n > kMaxItemsPerBatch) {
        batches.emplace_back();
        items = 0;
      }
      items += n;
      batches.back().push_back(std::move(e));
    }
    return batches;
  };
  auto send_batch = [&](std::vector<KvEvent>& events) {
    for (std::vector<KvEvent>& part : split(events)) {
      KvEventBatch batch;
      batch.ts = Now();
      batch.events = std::move(part);
      const std::string payload = EncodeKvEventBatch(batch);
      const std::string seq = EncodeSequence(++seq_);
      try {
        i.pub.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        i.pub.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        i.pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
        // A full queue drops it: subscribers see the gap and ask for a snapshot.
      }
    }
  };
  while (!stop_) {
    std::vector<zmq::pollitem_t> items = {{i.snapshot.handle(), 0, ZMQ_POLLIN, 0}};
    if (i.zap) items.push_back({i.zap->handle(), 0, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items.data(), items.size(), options_.flush);
      if (i.zap && (items[1].revents & ZMQ_POLLIN)) {
        std::vector<zmq::message_t> request;
        (void)zmq::recv_multipart(*i.zap, std::back_inserter(request));
        const bool ok = request.size() >= 7 && request[5].to_string() == "CURVE" && request[6].to_string() == i.client_public;
        const std::string id = request.size() >= 2 ? request[1].to_string() : "";
        std::array<zmq::const_buffer, 6> reply = {zmq::str_buffer("1.0"), zmq::buffer(id),
                                                  ok ? zmq::str_buffer("200") : zmq::str_buffer("400"),
                                                  ok ? zmq::str_buffer("OK") : zmq::str_buffer("not this cluster's key"),
                                                  zmq::str_buffer(""), zmq::str_buffer("")};
        (void)zmq::send_multipart(*i.zap, reply);
      }
      if ((items[0].revents & ZMQ_POLLIN) && Env::Default().Now() >= next_snapshot) {
        next_snapshot = Env::Default().Now() + kSnapshotInterval;
        std::vector<zmq::message_t> request;
        (void)zmq::recv_multipart(i.snapshot, std::back_inserter(request));
        if (!request.empty()) {
          const std::string who = request[0].to_string();
          std::vector<KvEvent> state(1);
          state[0].kind = KvEvent::Kind::kCleared;
          for (const auto& [key, page] : i.mirror) {
            KvEvent e;
            e.keys = {key};
            e.has_parent = page.has_parent;
            e.parent = page.parent;
            e.tokens = page.tokens;
            e.block_size = int64_t(page.tokens.size());
            e.medium = options_.medium;
            state.push_back(std::move(e));
          }
          const std::string seq = EncodeSequence(seq_.load());
          int64_t sent = 0;
          for (std::vector<KvEvent>& part : split(state)) {
            KvEventBatch batch;
            batch.ts = Now();
            batch.events = std::move(part);
            const std::string payload = EncodeKvEventBatch(batch);
            std::array<zmq::const_buffer, 3> reply = {zmq::buffer(who), zmq::buffer(seq), zmq::buffer(payload)};
            (void)zmq::send_multipart(i.snapshot, reply, zmq::send_flags::dontwait);
            ++sent;
          }
          // The end says how many batches came before it: a subscriber that
          // got fewer (a full queue dropped some) asks again.
          const std::string end = EncodeSequence(-1), count = EncodeSequence(sent);
          std::array<zmq::const_buffer, 3> done = {zmq::buffer(who), zmq::buffer(end), zmq::buffer(count)};
          (void)zmq::send_multipart(i.snapshot, done, zmq::send_flags::dontwait);
        }
      }
    } catch (const std::exception& e) {  // ZeroMQ's errors, and an allocation that failed (invariant 7)
      TLOG_WARN("tandem kv events: %s\n", e.what());
    }
    std::deque<PrefixIndex::Event> queue;
    bool overflowed = false;
    {
      MutexLock lock(mu_);
      queue.swap(queue_);
      queued_items_ = 0;
      std::swap(overflowed, overflowed_);
    }
    std::vector<KvEvent> events;
    if (overflowed) {
      i.mirror.clear();
      events.emplace_back().kind = KvEvent::Kind::kCleared;
    }
    for (PrefixIndex::Event& e : queue) {
      KvEvent out;
      out.keys = e.keys;
      out.medium = options_.medium;
      switch (e.kind) {
        case PrefixIndex::Event::Kind::kStored: {
          out.kind = KvEvent::Kind::kStored;
          // A prompt's first page has no parent block (vLLM's schema), whatever
          // its tenant's root.
          out.has_parent = !e.from_root;
          out.parent = out.has_parent ? e.parent_key : 0;
          out.block_size = kPageTokens;
          for (size_t k = 0; k < e.keys.size(); ++k) {
            Impl::Page& page = i.mirror[e.keys[k]];
            page.has_parent = k > 0 || out.has_parent;
            page.parent = k > 0 ? e.keys[k - 1] : out.parent;
            page.tokens.assign(e.tokens.begin() + long(k * kPageTokens),
                               e.tokens.begin() + long(std::min(e.tokens.size(), (k + 1) * kPageTokens)));
          }
          out.tokens = std::move(e.tokens);
          break;
        }
        case PrefixIndex::Event::Kind::kRemoved:
          out.kind = KvEvent::Kind::kRemoved;
          for (uint64_t k : e.keys) i.mirror.erase(k);
          break;
        case PrefixIndex::Event::Kind::kCleared:
          out.kind = KvEvent::Kind::kCleared;
          out.keys.clear();
          i.mirror.clear();
          break;
      }
      events.push_back(std::move(out));
    }
    if (!events.empty()) send_batch(events);
  }
}

// ---------------------------------------------------------------- subscriber

struct KvEventSubscriber::Impl {
  zmq::context_t context{1};
  struct Source {
    KvSource spec;
    // Its events, on a socket of its own: a message is that engine's because
    // it came on the connection to the address its record names, whatever
    // topic it claims (one naming another's topic is refused).
    std::unique_ptr<zmq::socket_t> sub;
    int64_t last = -1;  // the last batch applied; -1: not read yet
    bool syncing = false;
    std::unique_ptr<zmq::socket_t> dealer;  // while a snapshot comes
    std::chrono::steady_clock::time_point asked;
    int64_t snapshot_seq = -1, snapshot_batches = 0;
    bool snapshot_bad = false;  // a batch of it was refused
    std::vector<KvEvent> snapshot;
    std::deque<std::pair<int64_t, std::vector<KvEvent>>> held;  // numbered batches that came meanwhile
    size_t held_items = 0;
  };
  std::map<std::string, Source> sources;  // by name
  size_t logged = 0;  // sources left out, the first 32 logged
};

KvEventSubscriber::KvEventSubscriber(CachedPrefixes& into, KvCurveKeys keys)
    : into_(into), keys_(std::move(keys)), impl_(std::make_unique<Impl>()) {}

StatusOr<std::unique_ptr<KvEventSubscriber>> KvEventSubscriber::Start(CachedPrefixes& into, KvCurveKeys keys) {
  auto s = std::unique_ptr<KvEventSubscriber>(new KvEventSubscriber(into, std::move(keys)));
  s->thread_ = std::thread([raw = s.get()] {
    try {
      raw->Run();
    } catch (const std::exception& e) {  // never std::terminate: placement goes on by conversation
      TLOG_ERROR("tandem kv events: the subscriber stopped: %s\n", e.what());
    }
  });
  return s;
}

KvEventSubscriber::~KvEventSubscriber() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void KvEventSubscriber::SetSources(std::vector<KvSource> sources) {
  MutexLock lock(mu_);
  wanted_ = std::move(sources);
}

KvEventSubscriber::Counters KvEventSubscriber::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

bool KvEventSubscriber::synced() const {
  MutexLock lock(mu_);
  return synced_;
}

std::string KvEventSubscriber::MetricsText() const {
  const Counters c = counters();
  auto line = [](const char* name, const char* help, const char* type, int64_t v) {
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(v) + "\n";
  };
  return line("tandem_kv_events_batches_total", "KV event batches applied from the engines followed", "counter", c.batches) +
         line("tandem_kv_events_snapshots_total", "Whole-cache snapshots read (a join or a gap)", "counter", c.snapshots) +
         line("tandem_kv_events_gaps_total", "Batches found missing (a snapshot was read again)", "counter", c.gaps) +
         line("tandem_kv_events_refused_total", "Messages refused (another engine's topic, malformed)", "counter", c.refused) +
         line("tandem_kv_events_synced", "1 when every engine followed has been read whole", "gauge", synced() ? 1 : 0);
}

void KvEventSubscriber::Run() {
  Impl& impl = *impl_;
  auto apply = [&](const std::string& name, const std::vector<KvEvent>& events) {
    for (const KvEvent& e : events) {
      switch (e.kind) {
        case KvEvent::Kind::kStored: into_.Stored(name, e.keys); break;
        case KvEvent::Kind::kRemoved: into_.Removed(name, e.keys); break;
        case KvEvent::Kind::kCleared: into_.Clear(name); break;
      }
    }
  };
  auto count = [&](auto field, int64_t n = 1) {
    MutexLock lock(mu_);
    counters_.*field += n;
  };
  // A socket to one engine: bounded messages, a bounded queue, the cluster's keys.
  auto open = [&](zmq::socket_type type) {
    auto socket = std::make_unique<zmq::socket_t>(impl.context, type);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
    socket->set(zmq::sockopt::rcvhwm, kReceiveQueue);
    if (keys_.enabled()) {
      socket->set(zmq::sockopt::curve_serverkey, keys_.server());
      socket->set(zmq::sockopt::curve_publickey, keys_.public_z85);
      socket->set(zmq::sockopt::curve_secretkey, keys_.secret_z85);
    }
    return socket;
  };
  auto ask = [&](Impl::Source& s) {
    s.dealer.reset();
    s.dealer = open(zmq::socket_type::dealer);
    s.dealer->connect(s.spec.snapshot);
    const std::string from = EncodeSequence(0);
    (void)s.dealer->send(zmq::buffer(from), zmq::send_flags::dontwait);
    s.syncing = true;
    s.asked = Env::Default().Now();
    s.snapshot.clear();
    s.snapshot_seq = -1;
    s.snapshot_batches = 0;
    s.snapshot_bad = false;
  };
  // Asking may fail on an endpoint ZeroMQ refuses: that source stays unsynced
  // and is asked again later; no other source is held up.
  auto ask_safely = [&](Impl::Source& s) {
    try {
      ask(s);
    } catch (const zmq::error_t& e) {
      s.dealer.reset();
      s.syncing = true;
      s.asked = Env::Default().Now();
      count(&Counters::refused);
    }
  };
  auto hold = [&](Impl::Source& s, int64_t seq, std::vector<KvEvent> events) {
    size_t n = 0;
    for (const KvEvent& e : events) n += e.keys.size() + 1;
    if (s.held_items + n > kMaxHeldItems) {
      s.held.clear();
      s.held_items = 0;
      ask_safely(s);
    }
    s.held_items += n;
    s.held.emplace_back(seq, std::move(events));
  };
  while (!stop_) {
    try {
      std::optional<std::vector<KvSource>> wanted;
      {
        MutexLock lock(mu_);
        wanted.swap(wanted_);
      }
      if (wanted) {
        // A name (the engine's address) two records claim is followed for
        // neither: one of them speaks for an engine it is not.
        std::map<std::string, int> claims;
        for (const KvSource& w : *wanted) ++claims[w.name];
        for (auto it = impl.sources.begin(); it != impl.sources.end();) {
          const bool keep = claims[it->first] == 1 &&
                            std::find(wanted->begin(), wanted->end(), it->second.spec) != wanted->end();
          if (keep) {
            ++it;
            continue;
          }
          into_.Forget(it->first);
          it = impl.sources.erase(it);
        }
        for (const KvSource& w : *wanted) {
          if (impl.sources.count(w.name)) continue;
          if (claims[w.name] > 1) {
            if (impl.logged < 32) {
              ++impl.logged;
              TLOG_WARN("tandem kv events: not following %s: %d records claim it\n", w.name.c_str(), claims[w.name]);
            }
            count(&Counters::refused);
            claims[w.name] = 0;  // counted once
            continue;
          }
          if (claims[w.name] == 0) continue;
          if (impl.sources.size() >= kMaxSources) {
            if (impl.logged < 32) {
              ++impl.logged;
              TLOG_WARN("tandem kv events: following %zu engines already; not %s\n", kMaxSources, w.name.c_str());
            }
            count(&Counters::refused);
            continue;
          }
          std::unique_ptr<zmq::socket_t> sub;
          try {
            sub = open(zmq::socket_type::sub);
            sub->set(zmq::sockopt::subscribe, w.topic);
            sub->connect(w.events);  // first: what follows the snapshot is held
          } catch (const zmq::error_t& e) {
            TLOG_WARN("tandem kv events: not following %s at %s: %s\n", w.name.c_str(), w.events.c_str(), e.what());
            count(&Counters::refused);
            continue;
          }
          Impl::Source& s = impl.sources[w.name];
          s.spec = w;
          s.sub = std::move(sub);
          ask_safely(s);
        }
        MutexLock lock(mu_);
        sources_applied_ = true;
      }
      std::vector<zmq::pollitem_t> items;
      std::vector<Impl::Source*> following, asking;
      for (auto& [name, s] : impl.sources) {
        items.push_back({s.sub->handle(), 0, ZMQ_POLLIN, 0});
        following.push_back(&s);
      }
      for (auto& [name, s] : impl.sources) {
        if (s.dealer) {
          items.push_back({s.dealer->handle(), 0, ZMQ_POLLIN, 0});
          asking.push_back(&s);
        }
      }
      if (items.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // nothing to follow yet: SetSources is polled
        continue;
      }
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
      for (size_t k = 0; k < following.size(); ++k) {
        if (!(items[k].revents & ZMQ_POLLIN)) continue;
        Impl::Source& s = *following[k];
        for (int n = 0; n < 256; ++n) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(*s.sub, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          auto seq = frames.size() == 3 && frames[0].to_string() == s.spec.topic
                         ? DecodeSequence(frames[1].to_string())
                         : StatusOr<int64_t>(InvalidArgument("not this engine's topic, or not three frames"));
          if (seq.ok() && (*seq < 1 || *seq == INT64_MAX)) seq = InvalidArgument("a sequence number out of range");
          auto batch = seq.ok() ? DecodeKvEventBatch(frames[2].to_string(), size_t(1) << 20, /*keep_tokens=*/false)
                                : StatusOr<KvEventBatch>(seq.status());
          if (!batch.ok()) {
            count(&Counters::refused);
            continue;
          }
          if (s.syncing) {
            if (s.held.size() >= kMaxHeldBatches) {
              s.held.clear();
              s.held_items = 0;
              ask_safely(s);
            }
            hold(s, *seq, std::move(batch->events));
          } else if (*seq <= s.last) {
            // Already in the snapshot.
          } else if (*seq == s.last + 1) {
            apply(s.spec.name, batch->events);
            s.last = *seq;
            count(&Counters::batches);
          } else {
            count(&Counters::gaps);
            s.held.clear();
            s.held_items = 0;
            hold(s, *seq, std::move(batch->events));
            ask_safely(s);
          }
        }
      }
      // Sources whose ask failed (no dealer): again after the deadline.
      for (auto& [name, s] : impl.sources) {
        if (s.syncing && !s.dealer && Env::Default().Now() - s.asked > kSnapshotDeadline) ask_safely(s);
      }
      for (size_t k = 0; k < asking.size(); ++k) {
        Impl::Source& s = *asking[k];
        const std::string name = s.spec.name;
        if (Env::Default().Now() - s.asked > kSnapshotDeadline) {  // however it trickles
          ask_safely(s);
          continue;
        }
        if (!(items[following.size() + k].revents & ZMQ_POLLIN)) continue;
        for (int n = 0; n < 64 && s.dealer; ++n) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(*s.dealer, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          auto seq = frames.size() == 2 ? DecodeSequence(frames[0].to_string()) : StatusOr<int64_t>(InvalidArgument("frames"));
          if (!seq.ok()) {
            count(&Counters::refused);
            continue;
          }
          if (*seq >= 0) {
            auto batch = DecodeKvEventBatch(frames[1].to_string(), size_t(1) << 20, /*keep_tokens=*/false);
            ++s.snapshot_batches;
            if (!batch.ok() || s.snapshot.size() + batch->events.size() > CachedPrefixes::kMaxKeysPerEngine) {
              count(&Counters::refused);
              s.snapshot_bad = true;
              continue;
            }
            s.snapshot_seq = *seq;
            for (KvEvent& e : batch->events) s.snapshot.push_back(std::move(e));
            continue;
          }
          auto sent = DecodeSequence(frames[1].to_string());
          if (s.snapshot_bad || !sent.ok() || *sent != s.snapshot_batches) {  // incomplete: again
            count(&Counters::gaps);
            ask_safely(s);
            break;
          }
          // The end: the snapshot, then what came after it, in order.
          into_.Clear(name);
          apply(name, s.snapshot);
          s.last = std::max<int64_t>(s.snapshot_seq, 0);
          s.snapshot.clear();
          s.dealer.reset();
          s.syncing = false;
          s.held_items = 0;
          count(&Counters::snapshots);
          std::sort(s.held.begin(), s.held.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
          for (auto& [hseq, events] : s.held) {
            if (hseq <= s.last) continue;
            if (hseq != s.last + 1) {
              count(&Counters::gaps);
              ask_safely(s);
              break;
            }
            apply(name, events);
            s.last = hseq;
            count(&Counters::batches);
          }
          if (!s.syncing) s.held.clear();
          break;
        }
      }
      bool all = true;
      for (const auto& [name, s] : impl.sources) all = all && !s.syncing && s.last >= 0;
      MutexLock lock(mu_);
      synced_ = all && sources_applied_;
    } catch (const std::exception& e) {  // ZeroMQ's errors, and an allocation that failed (invariant 7)
      TLOG_WARN("tandem kv events: %s\n", e.what());
    }
  }
}

}  // namespace tandem::discovery
