// A small client of etcd's v3 API through its JSON gateway (HTTP/1.1 POSTs
// to /v3/...; keys and values base64, 64-bit numbers as strings), the part
// discovery needs: leases (grant, keep alive, revoke), put, delete, a range
// over a prefix, and a watch from a revision. It follows the API's documented
// semantics: a keep-alive answered without a positive TTL means the lease is
// gone (expired or revoked) and its keys with it; a watch begins at the
// revision after the range it follows, so no change between them is missed;
// a watch cancelled for compaction must be replaced by a fresh range.
//
// Every call has a deadline (a connect and a read timeout); none retries:
// the caller decides what an unreachable etcd means. Thread safety: calls
// may run on any thread at once (each opens its own connection).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::discovery {

// Where etcd is and the prefix every key of this deployment lives under:
// etcd://HOST:PORT/PREFIX (the prefix has no trailing slash; "/tandem" when
// the URL gives none).
struct EtcdEndpoint {
  std::string host;
  int port = 2379;
  std::string prefix = "/tandem";
  std::string ToString() const;
};
StatusOr<EtcdEndpoint> ParseEtcdUrl(const std::string& url);

struct EtcdKv {
  std::string key, value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  std::vector<EtcdKv> kvs;
  int64_t revision = 0;  // the store's revision the range was read at
};

// One page of a range: at most `limit` keys, read at one revision.
struct EtcdPage {
  std::vector<EtcdKv> kvs;
  int64_t revision = 0;
  bool more = false;  // keys after the last one remain
};

struct EtcdEvent {
  bool deleted = false;  // false: put
  EtcdKv kv;             // a delete carries only the key and its revision
};

class EtcdClient {
 public:
  static constexpr size_t kMaxAnswerBytes = size_t(8) << 20;  // one answer (a range of thousands of engines is far less)

  explicit EtcdClient(EtcdEndpoint endpoint, std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

  const EtcdEndpoint& endpoint() const { return endpoint_; }
  // A lease of `ttl_s` seconds; its id.
  StatusOr<int64_t> GrantLease(int64_t ttl_s);
  // One keep-alive; the lease's remaining TTL. NotFound: the lease is gone.
  StatusOr<int64_t> KeepAlive(int64_t lease);
  Status Revoke(int64_t lease);
  // lease 0: the key outlives every lease.
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status Delete(const std::string& key);
  // Every key that begins with `prefix`, and the revision of that view.
  StatusOr<EtcdRange> RangePrefix(const std::string& prefix);
  // The keys of `prefix` from `from` on (`from` itself included), at most
  // `limit` of them, as of `revision` (0: now). ResourceExhausted: the
  // answer would be over `max_bytes` (ask for fewer keys).
  StatusOr<EtcdPage> RangePage(const std::string& prefix, const std::string& from, int64_t revision, int64_t limit,
                               size_t max_bytes);
  // The store's revision now (a count of the prefix's keys: no value is sent).
  StatusOr<int64_t> Revision(const std::string& prefix);

  // Watches every key beginning with `prefix` from `start_revision` on,
  // calling on_events (on this thread) with each batch; returns when
  // on_events returns false, when `stop` is set (checked at least every
  // `idle`, which also ends a watch that hears nothing, so the caller can
  // check etcd is still there), or on an error. OutOfRange: the revision was
  // compacted (range again). ResourceExhausted: one answer of the stream was
  // over 8 MiB (range again). The status is OK when stopped or idle. Large
  // revisions come in fragments (each well under the bound).
  Status Watch(const std::string& prefix, int64_t start_revision,
               const std::function<bool(const std::vector<EtcdEvent>&, int64_t revision)>& on_events,
               const std::atomic<bool>& stop, std::chrono::milliseconds idle);

 private:
  StatusOr<std::string> Call(const std::string& path, const std::string& body, size_t max_bytes = kMaxAnswerBytes) const;
  const EtcdEndpoint endpoint_;
  const std::chrono::milliseconds timeout_;
};

// The end of the key range of every key that begins with `prefix` (etcd's
// range_end: the prefix with its last byte incremented).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace tandem::discovery
