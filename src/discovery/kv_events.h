// KV events between engines (the schema: discovery/kv_events_wire.h). Every
// engine that runs with discovery publishes what its prefix cache stores and
// removes; routers follow the decode servers' events and decode servers the
// prefill engines', into a CachedPrefixes (common/cached_prefixes.h) that
// placement reads.
//
// Two ZeroMQ sockets per publisher: PUB for the events (each batch numbered)
// and ROUTER for snapshots. A subscriber that joins, or sees a number
// missing, asks the snapshot socket for the whole state: [sequence number,
// batch] replies (the first batch begins with AllBlocksCleared) then [-1, ""];
// events numbered after the snapshot apply on top of it (they are held while
// it comes). So a router that restarts knows every engine's cache at once.
//
// Security: with a cluster key both sockets are CURVE servers whose keys are
// derived from it, and only a client holding the same derived key is
// admitted (a ZAP handler checks it before any message is read); events are
// encrypted on the wire, as they name cached token ids. Without a key
// (--insecure-no-cluster-key, loopback only) they are plain.
//
// Attribution: a subscriber follows each engine on a socket of its own,
// connected to the endpoints the engine's (signed) record names, and takes
// from it only messages under that engine's topic: no member of the cluster
// can speak for another (its sequence numbers, its cache).
//
// Bounds: messages over 4 MiB are dropped by ZeroMQ before they are read; a
// batch holds at most 4096 events; a subscriber's sockets queue at most 16
// unread messages an engine; it holds at most 4096 numbered batches of an
// engine while its snapshot comes (more: it asks again).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cached_prefixes.h"
#include "common/mutex.h"
#include "common/status.h"
#include "prefix/prefix_index.h"

namespace tandem::discovery {

// The CURVE key pair every engine of a cluster derives from its 32-byte
// secret (ClusterKey::Prove of a fixed label); empty secret: none.
struct KvCurveKeys {
  std::string public_z85, secret_z85;  // 40 characters each
  // The publisher's key a subscriber expects (empty: public_z85, the
  // cluster's one key pair; a test sets another pair against it).
  std::string server_public_z85;
  bool enabled() const { return !secret_z85.empty(); }
  const std::string& server() const { return server_public_z85.empty() ? public_z85 : server_public_z85; }
};
StatusOr<KvCurveKeys> DeriveKvCurveKeys(const std::vector<uint8_t>& secret);

struct KvPublisherOptions {
  std::string host = "127.0.0.1";  // listened on
  std::string advertise;           // what peers dial (default: host)
  int port = 0;                    // events on port, snapshots on port + 1; 0: any free ports
  std::string topic;               // this engine's name (its address): every message's first frame
  std::string medium = "device";
  KvCurveKeys keys;
  std::chrono::milliseconds flush{10};  // events are batched this long
};

class KvEventPublisher {
 public:
  static StatusOr<std::unique_ptr<KvEventPublisher>> Start(KvPublisherOptions options);
  ~KvEventPublisher();  // stops the thread; the sockets close

  // The prefix index's hook (any thread; it only queues).
  void Publish(PrefixIndex::Event event);
  PrefixIndex::EventHook Hook() {
    return [this](PrefixIndex::Event e) { Publish(std::move(e)); };
  }
  const std::string& topic() const { return options_.topic; }
  const std::string& events_endpoint() const { return events_endpoint_; }      // tcp://advertise:port
  const std::string& snapshot_endpoint() const { return snapshot_endpoint_; }  // tcp://advertise:port
  int64_t published() const { return seq_.load(); }

  struct Impl;

 private:
  explicit KvEventPublisher(KvPublisherOptions options);
  void Run();
  const KvPublisherOptions options_;
  std::unique_ptr<Impl> impl_;
  std::string events_endpoint_, snapshot_endpoint_;
  std::atomic<int64_t> seq_{0};
  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::deque<PrefixIndex::Event> queue_ GUARDED_BY(mu_);
  size_t queued_items_ GUARDED_BY(mu_) = 0;
  bool overflowed_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// An engine to follow: its name (what placement calls it: its address), the
// topic its messages carry, and its endpoints.
struct KvSource {
  std::string name, topic, events, snapshot;
  bool operator==(const KvSource&) const = default;
};

class KvEventSubscriber {
 public:
  static StatusOr<std::unique_ptr<KvEventSubscriber>> Start(CachedPrefixes& into, KvCurveKeys keys);
  ~KvEventSubscriber();

  // The engines to follow now (discovery's view; any thread). One no longer
  // named is forgotten (its keys leave `into`).
  void SetSources(std::vector<KvSource> sources);

  struct Counters {
    int64_t batches = 0, events = 0, snapshots = 0, gaps = 0, refused = 0;
  };
  Counters counters() const;
  // True when every source named has been read whole (a snapshot and the events after it).
  bool synced() const;
  std::string MetricsText() const;

  struct Impl;

 private:
  KvEventSubscriber(CachedPrefixes& into, KvCurveKeys keys);
  void Run();
  CachedPrefixes& into_;
  const KvCurveKeys keys_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
  mutable Mutex mu_;
  std::optional<std::vector<KvSource>> wanted_ GUARDED_BY(mu_);
  Counters counters_ GUARDED_BY(mu_);
  bool synced_ GUARDED_BY(mu_) = false;
  bool sources_applied_ GUARDED_BY(mu_) = false;  // SetSources has been applied at least once
  std::thread thread_;
};

}  // namespace tandem::discovery
