// Engines find each other on etcd (discovery/etcd_client.h). Each engine
// registers what it is under <prefix>/<role>/<instance>, a key bound to a
// lease it keeps alive: an engine that dies or is cut off leaves every list
// when its lease lapses (its TTL), one that stops cleanly at once (it revokes
// the lease). Watchers keep a view of one role's engines (decode servers
// watch prefill engines, routers watch decode servers) and hear every change.
//
// etcd's writers are not trusted. A watch takes a record only under its own
// key (<prefix>/<role>/<instance in hex>), bound to the lease etcd holds it
// under (the lease is written into the record, and signed with it: a record
// replayed after its engine died dies with the lease it names), and passing
// the deployment's check (its proof, DiscoveryOptions::check). Whatever else
// is under the prefix is counted by reason and left out, logged the first
// few times; nothing of it is kept. A view is read in pages of bounded
// bytes, so no amount of junk beside the records keeps a watcher from
// reading them: the flood costs a watcher time, not memory or its view.
//
// etcd unreachable: registrations and views stay as they were (engines go on
// serving with the last view they had), Health() and the metrics say so, and
// everything is read again when etcd answers: a lease that lapsed meanwhile
// is granted anew and the record put again; a view is read whole again.
//
// Thread safety: every method may be called from any thread. Callbacks run
// on the discovery's own threads, one per Register and per Watch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/mutex.h"
#include "common/status.h"
#include "discovery/etcd_client.h"

namespace tandem::discovery {

// What an engine says of itself in etcd.
struct EngineRecord {
  std::string role;       // "prefill" or "decode"
  uint64_t instance = 0;  // the engine's instance id (a restarted engine has a new one)
  std::string address;    // where peers reach it: a prefill engine's handoff host:port, a decode server's HTTP host:port
  std::string transport;  // how handoff bytes travel (prefill): "tcp", "ucx", "shm"
  std::string layout, weights, numerics;  // what peers must match (the handshake checks them again)
  int64_t load = 0;       // requests it holds now
  // Its KV events (discovery/kv_events.h): the topic its messages carry and
  // the two endpoints; empty when it publishes none.
  std::string kv_topic, kv_events, kv_snapshot;
  // The etcd lease the record is put under (set by Discovery::Register); a
  // watcher takes the record only from a key held under that lease.
  int64_t lease = 0;
  // Hex of an HMAC over the rest of the record with the cluster key (the
  // engine's proof that it belongs: etcd's writers are not trusted to say
  // where requests go); empty without a key.
  std::string proof;
  std::string ToJson() const;
  std::string UnsignedJson() const;  // ToJson() without the proof: what it covers
  static StatusOr<EngineRecord> FromJson(const std::string& text);
};

struct DiscoveryOptions {
  // The time its retries are paced by (tests give a fake one).
  const Env* env = &Env::Default();
  EtcdEndpoint etcd;
  int64_t ttl_s = 10;                               // the lease: how long a silent engine stays listed
  std::chrono::milliseconds retry{1000};            // etcd unreachable: asked again this often
  std::chrono::milliseconds call_timeout{2000};     // one call to etcd
  std::chrono::milliseconds watch_idle{2000};       // a watch that hears nothing this long asks whether etcd is there
  // Proves a record belongs to this deployment (its proof: an HMAC with the
  // cluster key), given it with its lease set; none: records go unsigned.
  std::function<void(EngineRecord*)> seal;
  // Whether a watch takes a record (its proof; an address it may dial); the
  // reason if not. None: every well-formed record bound to its lease.
  std::function<Status(const EngineRecord&)> check;
};

class Discovery {
 public:
  explicit Discovery(DiscoveryOptions options);
  ~Discovery();  // Stop()
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // Keeps this engine registered while the discovery lives. `describe` is
  // asked again at every keep-alive; a changed record (its load) is put again.
  // The record's lease is set here and the record sealed (options.seal).
  // Once per Discovery.
  void Register(std::function<EngineRecord()> describe);
  // Calls on_change with every engine of `role` registered now: when first
  // read, then at each change (records not taken are left out, counted, and
  // the first few logged). Not called while etcd is unreachable: the last
  // view stands.
  void Watch(const std::string& role, std::function<void(const std::vector<EngineRecord>&)> on_change);
  // Ends the threads; a registration's lease is revoked (its key goes now).
  void Stop();

  // {"etcd", "reachable", "error" (the last), "registered", "peers": {role: n}}
  nlohmann::json Health() const;
  // tandem_discovery_* lines for /metrics.
  std::string MetricsText() const;
  // True once etcd has answered every caller at least once since it last failed.
  bool reachable() const { return reachable_.load(); }

  std::string KeyOf(const std::string& role, uint64_t instance) const;

 private:
  void RunRegistration(std::function<EngineRecord()> describe);
  void RunWatch(std::string role, std::function<void(const std::vector<EngineRecord>&)> on_change);
  class Intake;
  // Reads the view of `prefix` whole, page by page at one revision; the revision.
  StatusOr<int64_t> ReadView(const std::string& prefix, Intake& intake, std::map<std::string, EngineRecord>* view);
  void Refused(const std::string& role, const char* reason);
  void Failed(const Status& why);
  void Answered();
  bool WaitFor(std::chrono::milliseconds d);  // false: stopping

  const DiscoveryOptions options_;
  EtcdClient etcd_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> reachable_{false};
  std::atomic<bool> registered_{false};
  std::atomic<int64_t> errors_{0}, lease_grants_{0};
  mutable Mutex mu_;
  std::condition_variable stop_cv_;
  std::string last_error_ GUARDED_BY(mu_);
  std::map<std::string, int64_t> peers_ GUARDED_BY(mu_);    // role -> engines in the view
  std::map<std::string, int64_t> changes_ GUARDED_BY(mu_);  // role -> views delivered
  std::map<std::pair<std::string, std::string>, int64_t> refused_ GUARDED_BY(mu_);  // (role, reason) -> records left out
  int64_t floods_ GUARDED_BY(mu_) = 0;  // reads cut short: an answer over its bound, or too many keys
  bool registering_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // started by Register/Watch, joined by Stop (callers' thread)
  Mutex threads_mu_;
};

}  // namespace tandem::discovery
