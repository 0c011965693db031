#include "discovery/etcd_client.h"
#include "common/env.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <nlohmann/json.hpp>

namespace tandem::discovery {
namespace {

using nlohmann::json;

constexpr size_t kMaxAnswerBytes = EtcdClient::kMaxAnswerBytes;
constexpr size_t kMaxRecords = 4096;                 // keys under one role's prefix

std::string Base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

StatusOr<std::string> FromBase64(const std::string& text) {
  if (text.size() % 4 != 0) return InvalidArgument("etcd sent a base64 field of " + std::to_string(text.size()) + " characters");
  std::string out(text.size() / 4 * 3 + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), int(text.size()));
  if (n < 0) return InvalidArgument("etcd sent a field that is not base64");
  size_t pad = 0;
  for (size_t i = text.size(); i > 0 && text[i - 1] == '=' && pad < 2; --i) ++pad;
  out.resize(size_t(n) - pad);
  return out;
}

// Fields read by type, never by exception: a field of another type (or a
// value that is not an object) reads as absent.
const json& Member(const json& object, const char* field) {
  static const json kAbsent;
  if (!object.is_object()) return kAbsent;
  auto it = object.find(field);
  return it == object.end() ? kAbsent : *it;
}
std::string Str(const json& object, const char* field) {
  const json& v = Member(object, field);
  return v.is_string() ? v.get<std::string>() : std::string();
}
bool Bool(const json& object, const char* field) {
  const json& v = Member(object, field);
  return v.is_boolean() && v.get<bool>();
}
// Printable ASCII only: etcd's text goes into logs and /health (JSON).
std::string Printable(std::string text) {
  if (text.size() > 200) text.resize(200);
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return text;
}

// proto3's JSON mapping writes 64-bit integers as strings and leaves zeros out.
int64_t Int(const json& object, const char* field) {
  if (!object.is_object()) return 0;
  auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return 0;
  try {
    return std::stoll(it->get<std::string>());
  } catch (...) {
    return 0;
  }
}

StatusOr<EtcdKv> ParseKv(const json& kv) {
  if (!kv.is_object()) return InvalidArgument("etcd sent a key-value that is not an object");
  EtcdKv out;
  TANDEM_ASSIGN_OR_RETURN(out.key, FromBase64(Str(kv, "key")));
  TANDEM_ASSIGN_OR_RETURN(out.value, FromBase64(Str(kv, "value")));
  out.mod_revision = Int(kv, "mod_revision");
  out.lease = Int(kv, "lease");
  return out;
}

std::string Why(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "could not connect";
    case httplib::Error::ConnectionTimeout: return "the connection timed out";
    case httplib::Error::Read: return "no answer in time, or it broke off";
    case httplib::Error::Write: return "the request could not be sent";
    default: return httplib::to_string(e);
  }
}

StatusOr<json> ParseAnswer(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Unavailable(std::string("etcd's answer to ") + what + " is not a JSON object");
  if (j.contains("error") || j.contains("code")) {
    // {"error": "...", "code": N, "message": "..."} or, on a stream, {"error": {"grpc_code": N, "message": "..."}}.
    std::string why = Str(j, "message");
    if (why.empty()) why = Str(j, "error");
    if (why.empty()) why = Str(Member(j, "error"), "message");
    if (why.empty()) why = text;
    return Unavailable(std::string("etcd refused ") + what + ": " + Printable(why));
  }
  return j;
}

}  // namespace

std::string EtcdEndpoint::ToString() const { return "etcd://" + host + ":" + std::to_string(port) + prefix; }

StatusOr<EtcdEndpoint> ParseEtcdUrl(const std::string& url) {
  const std::string scheme = "etcd://";
  if (url.rfind(scheme, 0) != 0) return InvalidArgument("a discovery URL is etcd://HOST:PORT/PREFIX, not '" + url + "'");
  std::string rest = url.substr(scheme.size());
  EtcdEndpoint e;
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) {
    std::string prefix = rest.substr(slash);
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    if (prefix != "/") e.prefix = prefix;
  }
  const size_t colon = authority.rfind(':');
  e.host = authority.substr(0, colon);
  if (e.host.empty()) return InvalidArgument("the discovery URL '" + url + "' names no host");
  if (colon != std::string::npos) {
    const std::string port = authority.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
      return InvalidArgument("the discovery URL '" + url + "' has no valid port");
    }
    e.port = std::stoi(port);
  }
  for (char c : e.prefix) {
    if (c < 0x21 || c > 0x7e) return InvalidArgument("the discovery prefix may hold only printable ASCII without spaces");
  }
  return e;
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = char(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(EtcdEndpoint endpoint, std::chrono::milliseconds timeout)
    : endpoint_(std::move(endpoint)), timeout_(timeout) {}

StatusOr<std::string> EtcdClient::Call(const std::string& path, const std::string& body, size_t max_bytes) const {
  httplib::Client cli(endpoint_.host, endpoint_.port);
  cli.set_connection_timeout(timeout_);
  cli.set_read_timeout(timeout_);
  cli.set_write_timeout(timeout_);
  std::string answer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  bool too_big = false, too_slow = false;
  const auto deadline = Env::Default().Now() + 2 * timeout_;  // the whole call, however it trickles
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (answer.size() + n > max_bytes) return !(too_big = true);
    if (Env::Default().Now() > deadline) return !(too_slow = true);
    answer.append(data, n);
    return true;
  };
  httplib::Result res{nullptr, httplib::Error::Unknown};
  try {
    res = cli.send(req);
  } catch (const std::exception& e) {
    return Unavailable("etcd's answer to " + path + " could not be read: " + Printable(e.what()));
  }
  if (too_big) return ResourceExhausted("etcd's answer to " + path + " is over " + std::to_string(max_bytes >> 10) + " KiB");
  if (too_slow) return Status(StatusCode::kDeadlineExceeded, "etcd's answer to " + path + " took over " + std::to_string(2 * timeout_.count()) + " ms");
  if (!res) {
    return Unavailable("etcd at " + endpoint_.host + ":" + std::to_string(endpoint_.port) + " did not answer " + path +
                       ": " + Why(res.error()));
  }
  if (res->status != 200) {
    return Unavailable("etcd answered " + path + " with HTTP " + std::to_string(res->status) + ": " + Printable(answer));
  }
  return answer;
}

StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump()));
  TANDEM_ASSIGN_OR_RETURN(json j, ParseAnswer(text, "a lease grant"));
  const int64_t id = Int(j, "ID");
  if (id == 0) return Unavailable("etcd granted no lease: " + text.substr(0, 200));
  return id;
}

StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  // A stream in gRPC; through the gateway, one request gives one answer.
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  const size_t newline = text.find('\n');
  TANDEM_ASSIGN_OR_RETURN(json j, ParseAnswer(text.substr(0, newline), "a keep-alive"));
  const int64_t ttl = Int(Member(j, "result"), "TTL");
  if (ttl <= 0) return NotFound("lease " + std::to_string(lease) + " is gone (expired or revoked)");
  return ttl;
}

Status EtcdClient::Revoke(int64_t lease) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()));
  return ParseAnswer(text, "a lease revoke").status();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json body = {{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/put", body.dump()));
  return ParseAnswer(text, "a put").status();
}

Status EtcdClient::Delete(const std::string& key) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/deleterange", json{{"key", Base64(key)}}.dump()));
  return ParseAnswer(text, "a delete").status();
}

StatusOr<EtcdRange> EtcdClient::RangePrefix(const std::string& prefix) {
  const json body = {{"key", Base64(prefix)}, {"range_end", Base64(PrefixRangeEnd(prefix))}};
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/range", body.dump()));
  TANDEM_ASSIGN_OR_RETURN(json j, ParseAnswer(text, "a range"));
  EtcdRange out;
  out.revision = Int(Member(j, "header"), "revision");
  if (out.revision <= 0) return Unavailable("etcd's range answer carries no revision");
  if (const json& kvs = Member(j, "kvs"); kvs.is_array()) {
    if (kvs.size() > kMaxRecords) return ResourceExhausted("etcd holds over " + std::to_string(kMaxRecords) + " keys under " + prefix);
    for (const json& kv : kvs) {
      TANDEM_ASSIGN_OR_RETURN(EtcdKv parsed, ParseKv(kv));
      out.kvs.push_back(std::move(parsed));
    }
  }
  return out;
}

StatusOr<EtcdPage> EtcdClient::RangePage(const std::string& prefix, const std::string& from, int64_t revision,
                                         int64_t limit, size_t max_bytes) {
  json body = {{"key", Base64(from)}, {"range_end", Base64(PrefixRangeEnd(prefix))}, {"limit", std::to_string(limit)}};
  if (revision > 0) body["revision"] = std::to_string(revision);
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/range", body.dump(), max_bytes));
  TANDEM_ASSIGN_OR_RETURN(json j, ParseAnswer(text, "a range"));
  EtcdPage out;
  out.revision = Int(Member(j, "header"), "revision");
  if (out.revision <= 0) return Unavailable("etcd's range answer carries no revision");
  out.more = Bool(j, "more");
  if (const json& kvs = Member(j, "kvs"); kvs.is_array()) {
    if (int64_t(kvs.size()) > limit) return Unavailable("etcd answered a range of " + std::to_string(limit) + " keys with more");
    for (const json& kv : kvs) {
      TANDEM_ASSIGN_OR_RETURN(EtcdKv parsed, ParseKv(kv));
      out.kvs.push_back(std::move(parsed));
    }
  }
  return out;
}

StatusOr<int64_t> EtcdClient::Revision(const std::string& prefix) {
  const json body = {{"key", Base64(prefix)}, {"range_end", Base64(PrefixRangeEnd(prefix))}, {"count_only", true}};
  TANDEM_ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/range", body.dump()));
  TANDEM_ASSIGN_OR_RETURN(json j, ParseAnswer(text, "a count"));
  const int64_t revision = Int(Member(j, "header"), "revision");
  if (revision <= 0) return Unavailable("etcd's count answer carries no revision");
  return revision;
}

Status EtcdClient::Watch(const std::string& prefix, int64_t start_revision,
                         const std::function<bool(const std::vector<EtcdEvent>&, int64_t)>& on_events,
                         const std::atomic<bool>& stop, std::chrono::milliseconds idle) {
  httplib::Client cli(endpoint_.host, endpoint_.port);
  cli.set_connection_timeout(timeout_);
  cli.set_read_timeout(idle);
  cli.set_write_timeout(timeout_);
  const json create = {{"create_request",
                        {{"key", Base64(prefix)},
                         {"range_end", Base64(PrefixRangeEnd(prefix))},
                         {"start_revision", std::to_string(start_revision)},
                         {"fragment", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = create.dump();
  req.set_header("Content-Type", "application/json");
  std::string pending;  // an answer's bytes up to its newline
  size_t scanned = 0;   // bytes of pending already searched for a newline
  // A revision's events split over several answers (fragment: true on all
  // but its last): handed on whole, so a stream that ends between them
  // leaves the revision to the next watch, not half of it.
  std::vector<EtcdEvent> fragments;
  size_t fragment_bytes = 0;
  bool created = false;
  Status outcome = Status::Ok();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (stop.load()) return false;
    pending.append(data, n);
    if (pending.size() > kMaxAnswerBytes) {
      outcome = ResourceExhausted("an etcd watch answer is over 8 MiB");
      return false;
    }
    for (size_t newline; (newline = pending.find('\n', scanned)) != std::string::npos;) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      scanned = 0;
      auto j = ParseAnswer(line, "a watch");
      if (!j.ok()) return (outcome = j.status()), false;
      const json& result = Member(*j, "result");
      if (Bool(result, "created")) created = true;
      if (Bool(result, "canceled")) {
        const int64_t compacted = Int(result, "compact_revision");
        outcome = compacted > 0 ? OutOfRange("the watch's revision " + std::to_string(start_revision) +
                                             " was compacted (now " + std::to_string(compacted) + ")")
                                : Unavailable("etcd cancelled the watch: " + Printable(Str(result, "cancel_reason")));
        return false;
      }
      if (const json& list = Member(result, "events"); list.is_array()) {
        fragment_bytes += line.size();
        if (fragment_bytes > kMaxAnswerBytes) {
          outcome = ResourceExhausted("an etcd watch revision's events are over 8 MiB");
          return false;
        }
        for (const json& e : list) {
          EtcdEvent event;
          event.deleted = Str(e, "type") == "DELETE";
          auto kv = ParseKv(Member(e, "kv"));
          if (!kv.ok()) return (outcome = kv.status()), false;
          event.kv = std::move(kv).value();
          fragments.push_back(std::move(event));
        }
      }
      if (Bool(result, "fragment")) continue;  // more of this revision follows
      std::vector<EtcdEvent> events = std::move(fragments);
      fragments.clear();
      fragment_bytes = 0;
      const int64_t revision = Int(Member(result, "header"), "revision");
      if (!events.empty() && !on_events(events, revision)) return false;
    }
    scanned = pending.size();
    return true;
  };
  httplib::Result res{nullptr, httplib::Error::Unknown};
  try {
    res = cli.send(req);
  } catch (const std::exception& e) {
    return Unavailable(std::string("an etcd watch broke: ") + Printable(e.what()));
  }
  if (!outcome.ok()) return outcome;
  if (!res && !created) {
    return Unavailable("etcd at " + endpoint_.host + ":" + std::to_string(endpoint_.port) +
                       " did not open a watch: " + Why(res.error()));
  }
  return Status::Ok();  // stopped, idle, or the stream ended: the caller ranges again
}

}  // namespace tandem::discovery
