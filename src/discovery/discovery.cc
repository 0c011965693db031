#include "discovery/discovery.h"

#include <cinttypes>
#include <cstdio>

#include "common/env.h"
#include "common/log.h"

namespace tandem::discovery {

using nlohmann::json;

namespace {

// HOST:PORT with a host of letters, digits, '.', '-' (or a bracketed IPv6
// address) and a port of 1-65535: nothing else is dialed.
bool HostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || text.size() - colon > 6 || text.size() > 300) return false;
  const std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const int p = std::stoi(port);
  if (p < 1 || p > 65535) return false;
  const bool v6 = host.size() > 2 && host.front() == '[' && host.back() == ']';
  const std::string allowed = v6 ? "0123456789abcdefABCDEF:." : "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-";
  return (v6 ? host.substr(1, host.size() - 2) : host).find_first_not_of(allowed) == std::string::npos;
}

bool TcpEndpoint(const std::string& text) { return text.rfind("tcp://", 0) == 0 && HostPort(text.substr(6)); }

}  // namespace

std::string EngineRecord::UnsignedJson() const {
  EngineRecord r = *this;
  r.proof.clear();
  return r.ToJson();
}

std::string EngineRecord::ToJson() const {
  json j{{"role", role},         {"instance", std::to_string(instance)},
              {"address", address},   {"transport", transport},
              {"layout", layout},     {"weights", weights},
              {"numerics", numerics}, {"load", load},
              {"kv_topic", kv_topic}, {"kv_events", kv_events},
              {"kv_snapshot", kv_snapshot}, {"lease", std::to_string(lease)}};
  if (!proof.empty()) j["proof"] = proof;
  return j.dump();
}

StatusOr<EngineRecord> EngineRecord::FromJson(const std::string& text) {
  if (text.size() > 64 * 1024) return InvalidArgument("an engine record is over 64 KiB");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("an engine record is not a JSON object");
  EngineRecord r;
  auto str = [&](const char* field, std::string* out) -> Status {
    auto it = j.find(field);
    if (it == j.end()) return Status::Ok();
    if (!it->is_string()) return InvalidArgument(std::string("an engine record's ") + field + " is not a string");
    *out = it->get<std::string>();
    return Status::Ok();
  };
  std::string instance, lease;
  TANDEM_RETURN_IF_ERROR(str("role", &r.role));
  TANDEM_RETURN_IF_ERROR(str("lease", &lease));
  TANDEM_RETURN_IF_ERROR(str("instance", &instance));
  TANDEM_RETURN_IF_ERROR(str("address", &r.address));
  TANDEM_RETURN_IF_ERROR(str("transport", &r.transport));
  TANDEM_RETURN_IF_ERROR(str("layout", &r.layout));
  TANDEM_RETURN_IF_ERROR(str("weights", &r.weights));
  TANDEM_RETURN_IF_ERROR(str("numerics", &r.numerics));
  TANDEM_RETURN_IF_ERROR(str("kv_topic", &r.kv_topic));
  TANDEM_RETURN_IF_ERROR(str("kv_events", &r.kv_events));
  TANDEM_RETURN_IF_ERROR(str("kv_snapshot", &r.kv_snapshot));
  TANDEM_RETURN_IF_ERROR(str("proof", &r.proof));
  for (const std::string* endpoint : {&r.kv_events, &r.kv_snapshot}) {
    if (!endpoint->empty() && !TcpEndpoint(*endpoint)) {
      return InvalidArgument("an engine record's KV events endpoint is not tcp://HOST:PORT");
    }
  }
  if (!HostPort(r.address)) return InvalidArgument("an engine record's address is not HOST:PORT");
  if (auto it = j.find("load"); it != j.end() && it->is_number_integer()) r.load = it->get<int64_t>();
  if (r.role.empty() || r.address.empty()) return InvalidArgument("an engine record names no role or no address");
  char* end = nullptr;
  r.instance = std::strtoull(instance.c_str(), &end, 10);
  if (instance.empty() || end == nullptr || *end != '\0') return InvalidArgument("an engine record's instance is not a number");
  if (!lease.empty()) {
    end = nullptr;
    r.lease = std::strtoll(lease.c_str(), &end, 10);
    if (end == nullptr || *end != '\0') return InvalidArgument("an engine record's lease is not a number");
  }
  return r;
}

Discovery::Discovery(DiscoveryOptions options) : options_(std::move(options)), etcd_(options_.etcd, options_.call_timeout) {}

Discovery::~Discovery() { Stop(); }

std::string Discovery::KeyOf(const std::string& role, uint64_t instance) const {
  char id[24];
  std::snprintf(id, sizeof(id), "%016" PRIx64, instance);
  return options_.etcd.prefix + "/" + role + "/" + id;
}

void Discovery::Register(std::function<EngineRecord()> describe) {
  {
    MutexLock lock(mu_);
    if (registering_) return;
    registering_ = true;
  }
  MutexLock lock(threads_mu_);
  threads_.emplace_back([this, d = std::move(describe)]() mutable { RunRegistration(std::move(d)); });
}

void Discovery::Watch(const std::string& role, std::function<void(const std::vector<EngineRecord>&)> on_change) {
  MutexLock lock(threads_mu_);
  threads_.emplace_back([this, role, f = std::move(on_change)]() mutable { RunWatch(role, std::move(f)); });
}

void Discovery::Stop() {
  {
    MutexLock lock(mu_);  // a waiter checks stop_ under mu_: the notify cannot fall between its check and its wait
    stop_ = true;
  }
  stop_cv_.notify_all();
  std::vector<std::thread> threads;
  {
    MutexLock lock(threads_mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

bool Discovery::WaitFor(std::chrono::milliseconds d) {
  UniqueLock lock(mu_);
  stop_cv_.wait_for(lock.native(), d, [&] { return stop_.load(); });
  return !stop_;
}

void Discovery::Failed(const Status& why) {
  ++errors_;
  const bool was = reachable_.exchange(false);
  std::string text = why.message().substr(0, 300);
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';  // it goes into /health's JSON
  }
  {
    MutexLock lock(mu_);
    last_error_ = text;
  }
  if (was) TLOG_WARN("tandem discovery: %s unreachable, keeping the last view: %s\n", options_.etcd.ToString().c_str(), why.message().c_str());
}

void Discovery::Answered() {
  if (!reachable_.exchange(true)) TLOG_INFO("tandem discovery: %s answers\n", options_.etcd.ToString().c_str());
}

// Grant a lease, put the record under it, keep it alive; a lease found gone
// (etcd lost it, or kept none across an outage longer than the TTL) is
// granted again and the record put again.
void Discovery::RunRegistration(std::function<EngineRecord()> describe) {
  int64_t lease = 0;
  std::string key, value;
  int beats = 0;
  const auto beat = std::chrono::milliseconds(std::max<int64_t>(100, options_.ttl_s * 1000 / 3));
  while (!stop_) {
    Status st = Status::Ok();
    try {
    EngineRecord record = describe();
    auto sealed = [&](int64_t under) {
      record.lease = under;
      if (options_.seal) options_.seal(&record);
      return record.ToJson();
    };
    if (lease == 0) {
      auto granted = etcd_.GrantLease(options_.ttl_s);
      st = granted.status();
      if (st.ok()) {
        key = KeyOf(record.role, record.instance);
        const std::string now_value = sealed(*granted);
        st = etcd_.Put(key, now_value, *granted);
        if (st.ok()) {
          lease = *granted;
          value = now_value;
          ++lease_grants_;
          registered_ = true;
          TLOG_INFO("tandem discovery: registered %s as %s (lease %" PRId64 ", TTL %" PRId64 " s)\n", record.address.c_str(),
                    key.c_str(), lease, options_.ttl_s);
        } else {
          (void)etcd_.Revoke(*granted);  // best effort: it lapses anyway
        }
      }
    } else {
      auto ttl = etcd_.KeepAlive(lease);
      st = ttl.status();
      if (st.code() == StatusCode::kNotFound) {
        TLOG_WARN("tandem discovery: %s: registering again\n", st.message().c_str());
        lease = 0;
        registered_ = false;
        Answered();  // etcd answered: it no longer knows the lease
        continue;
      }
      // Put again when the record changed, and every third beat anyway: a key
      // deleted under a live lease (by hand, by a restore) comes back.
      const std::string now_value = sealed(lease);
      if (st.ok() && (now_value != value || ++beats % 3 == 0)) {
        st = etcd_.Put(key, now_value, lease);
        if (st.ok()) value = now_value;
      }
    }
    } catch (const std::exception& e) {
      st = Internal(std::string("registering failed: ") + e.what());
    }
    if (st.ok()) {
      Answered();
    } else {
      Failed(st);
    }
    if (!WaitFor(st.ok() ? beat : options_.retry)) break;
  }
  if (lease != 0) {
    // Leave every list now rather than after the TTL.
    EtcdClient quick(options_.etcd, std::chrono::milliseconds(500));
    (void)quick.Revoke(lease);
  }
  registered_ = false;
}

// What a watch takes from etcd, and how the rest is left out: counted by
// reason, the first kMaxLogged logged, nothing kept.
class Discovery::Intake {
 public:
  static constexpr size_t kMaxView = 4096;   // engines of one role
  static constexpr size_t kMaxLogged = 32;   // refusals logged per watch; the rest only counted

  Intake(Discovery& d, std::string role) : d_(d), role_(std::move(role)) {}

  // Applies one key's value to `view`: the record it holds, or none.
  void Put(const EtcdKv& kv, std::map<std::string, EngineRecord>* view) {
    const char* reason = nullptr;
    std::string why;
    auto r = EngineRecord::FromJson(kv.value);
    if (!r.ok()) {
      reason = kv.value.size() > 64 * 1024 ? "size" : "unreadable";
      why = r.status().message();
    } else if (r->role != role_) {
      reason = "role";
      why = "it says it is a " + r->role.substr(0, 40);
    } else if (kv.key != d_.KeyOf(role_, r->instance)) {
      reason = "key";
      why = "it is not under its engine's key";
    } else if (Status st = d_.options_.check ? d_.options_.check(*r) : Status::Ok(); !st.ok()) {
      reason = "check";
      why = st.message();
    } else if (kv.lease == 0 || kv.lease != r->lease) {
      reason = "lease";
      why = "it is not held under the lease it names (a record replayed, or put by hand)";
    } else if (view->size() >= kMaxView && !view->count(kv.key)) {
      reason = "full";
      why = "the view holds " + std::to_string(kMaxView) + " engines already";
    }
    if (reason == nullptr) {
      (*view)[kv.key] = std::move(r).value();
      return;
    }
    view->erase(kv.key);
    d_.Refused(role_, reason);
    if (logged_ < kMaxLogged) {
      std::string key = kv.key.substr(0, 120);
      for (char& c : key) {
        if (c < 0x20 || c > 0x7e) c = '?';
      }
      TLOG_WARN("tandem discovery: ignoring %s: %s%s\n", key.c_str(), why.c_str(),
                ++logged_ == kMaxLogged ? " (further records left out are counted in "
                                          "tandem_discovery_refused_records_total, not logged)" : "");
    }
  }

 private:
  Discovery& d_;
  const std::string role_;
  size_t logged_ = 0;
};

void Discovery::Refused(const std::string& role, const char* reason) {
  MutexLock lock(mu_);
  ++refused_[{role, reason}];
}

StatusOr<int64_t> Discovery::ReadView(const std::string& prefix, Intake& intake, std::map<std::string, EngineRecord>* view) {
  constexpr int64_t kPageKeys = 64;
  constexpr size_t kPageBytes = size_t(4) << 20;  // one page's answer (a record is at most 64 KiB)
  constexpr size_t kMaxScanned = size_t(1) << 16;  // keys read in one view: past this, the flood is named
  std::map<std::string, EngineRecord> fresh;
  std::string from = prefix;
  int64_t revision = 0, limit = kPageKeys;
  size_t scanned = 0;
  for (;;) {
    auto page = etcd_.RangePage(prefix, from, revision, limit, kPageBytes);
    if (page.status().code() == StatusCode::kResourceExhausted && limit > 1) {
      limit /= 2;  // large values here: fewer keys a page
      continue;
    }
    if (!page.ok()) return page.status();
    if (revision == 0) revision = page->revision;
    for (const EtcdKv& kv : page->kvs) intake.Put(kv, &fresh);
    scanned += page->kvs.size();
    if (!page->more || page->kvs.empty()) break;
    if (scanned >= kMaxScanned) {
      {
        MutexLock lock(mu_);
        ++floods_;
      }
      TLOG_WARN("tandem discovery: over %zu keys under %s: reading no further (etcd holds a flood; the engines "
                "among the first %zu keys, and those known before past them, are used)\n", kMaxScanned,
                prefix.c_str(), scanned);
      // The engines this view held past the keys read stay (a flood sorted
      // before them must not remove them); the watch brings every change
      // from this revision on.
      const std::string& last = page->kvs.back().key;
      for (auto it = view->upper_bound(last); it != view->end(); ++it) fresh.insert(*it);
      break;
    }
    from = page->kvs.back().key + std::string(1, '\0');
    limit = std::min(kPageKeys, limit * 2);
  }
  *view = std::move(fresh);
  return revision;
}

// Read the role's keys, then watch from the next revision. A watch that ends
// quiet asks etcd for its revision (cheap, whatever the prefix holds) and
// goes on from where it was; any failure, a compaction, or a store whose
// revision went back (a new etcd) reads the view whole again.
void Discovery::RunWatch(std::string role, std::function<void(const std::vector<EngineRecord>&)> on_change) {
  const std::string prefix = options_.etcd.prefix + "/" + role + "/";
  Intake intake(*this, role);
  std::map<std::string, EngineRecord> view;  // key -> the record taken from it
  std::vector<std::string> delivered;        // the last view delivered, as JSON
  bool first = true;
  auto deliver = [&] {
    std::vector<EngineRecord> records;
    std::vector<std::string> now;
    for (const auto& [key, r] : view) {
      records.push_back(r);
      now.push_back(r.ToJson());
    }
    if (!first && now == delivered) return;
    first = false;
    {
      MutexLock lock(mu_);
      peers_[role] = int64_t(records.size());
      ++changes_[role];
    }
    delivered = std::move(now);
    on_change(records);
  };
  int64_t next = 0;  // the revision to watch from; 0: read the view whole first
  while (!stop_) {
    const auto began = options_.env->Now();
    try {
      if (next == 0) {
        auto revision = ReadView(prefix, intake, &view);
        if (!revision.ok()) {
          Failed(revision.status());
          if (!WaitFor(options_.retry)) break;
          continue;
        }
        Answered();
        deliver();
        next = *revision + 1;
      }
      int64_t seen = next - 1;
      Status st = etcd_.Watch(
          prefix, next,
          [&](const std::vector<EtcdEvent>& events, int64_t) {
            for (const EtcdEvent& e : events) {
              if (e.deleted) {
                view.erase(e.kv.key);
              } else {
                intake.Put(e.kv, &view);
              }
              seen = std::max(seen, e.kv.mod_revision);
            }
            deliver();
            return true;
          },
          stop_, options_.watch_idle);
      next = seen + 1;
      if (st.code() == StatusCode::kOutOfRange) {
        next = 0;
      } else if (st.code() == StatusCode::kResourceExhausted) {
        {
          MutexLock lock(mu_);
          ++floods_;
        }
        TLOG_WARN("tandem discovery: %s; reading the view again\n", st.message().c_str());
        next = 0;
      } else if (!st.ok()) {
        Failed(st);
        next = 0;
        if (!WaitFor(options_.retry)) break;
      } else if (!stop_) {
        auto revision = etcd_.Revision(prefix);
        if (!revision.ok()) {
          Failed(revision.status());
          next = 0;
          if (!WaitFor(options_.retry)) break;
        } else {
          Answered();
          if (*revision < seen) next = 0;  // not the store this watch began on
        }
      }
    } catch (const std::exception& e) {
      Failed(Internal(std::string("watching failed: ") + e.what()));
      next = 0;
      if (!WaitFor(options_.retry)) break;
    }
    // A watch that ended at once (compacted, refused) is not retried in a hot loop.
    if (options_.env->Now() - began < std::chrono::milliseconds(100) && !WaitFor(options_.retry / 5)) break;
  }
}

json Discovery::Health() const {
  MutexLock lock(mu_);
  json h = {{"etcd", options_.etcd.ToString()}, {"reachable", reachable_.load()}};
  if (!reachable_ && !last_error_.empty()) h["error"] = last_error_;
  if (registering_) h["registered"] = registered_.load();
  json peers = json::object();
  for (const auto& [role, n] : peers_) peers[role] = n;
  h["peers"] = std::move(peers);
  return h;
}

std::string Discovery::MetricsText() const {
  MutexLock lock(mu_);
  std::string out =
      "# HELP tandem_discovery_reachable 1 while etcd answers (0: serving with the last view)\n"
      "# TYPE tandem_discovery_reachable gauge\n"
      "tandem_discovery_reachable " + std::string(reachable_ ? "1" : "0") + "\n"
      "# HELP tandem_discovery_errors_total Calls to etcd that failed\n"
      "# TYPE tandem_discovery_errors_total counter\n"
      "tandem_discovery_errors_total " + std::to_string(errors_.load()) + "\n";
  if (registering_) {
    out += "# HELP tandem_discovery_registered 1 while this engine's record is under a live lease\n"
           "# TYPE tandem_discovery_registered gauge\n"
           "tandem_discovery_registered " + std::string(registered_ ? "1" : "0") + "\n"
           "# HELP tandem_discovery_lease_grants_total Leases granted (more than one: a lease was lost and renewed)\n"
           "# TYPE tandem_discovery_lease_grants_total counter\n"
           "tandem_discovery_lease_grants_total " + std::to_string(lease_grants_.load()) + "\n";
  }
  if (!peers_.empty()) {
    out += "# HELP tandem_discovery_peers Engines of a role in the current view\n# TYPE tandem_discovery_peers gauge\n";
    for (const auto& [role, n] : peers_) out += "tandem_discovery_peers{role=\"" + role + "\"} " + std::to_string(n) + "\n";
    out += "# HELP tandem_discovery_view_changes_total Views of a role delivered\n"
           "# TYPE tandem_discovery_view_changes_total counter\n";
    for (const auto& [role, n] : changes_) {
      out += "tandem_discovery_view_changes_total{role=\"" + role + "\"} " + std::to_string(n) + "\n";
    }
    out += "# HELP tandem_discovery_refused_records_total Keys under a watched role's prefix left out, by reason "
           "(unreadable, size, role, key, check, lease, full)\n"
           "# TYPE tandem_discovery_refused_records_total counter\n";
    for (const auto& [what, n] : refused_) {
      out += "tandem_discovery_refused_records_total{role=\"" + what.first + "\",reason=\"" + what.second + "\"} " +
             std::to_string(n) + "\n";
    }
    out += "# HELP tandem_discovery_floods_total Reads of a view cut short by etcd's size (an answer over its bound, "
           "or too many keys)\n# TYPE tandem_discovery_floods_total counter\n"
           "tandem_discovery_floods_total " + std::to_string(floods_) + "\n";
  }
  return out;
}

}  // namespace tandem::discovery
