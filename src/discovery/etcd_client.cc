#include "discovery/etcd_client.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <nlohmann/json.hpp>

namespace tandem::discovery {
namespace {

using nlohmann::json;

constexpr size_t kMaxAnswerBytes = size_t(64) << 20;  // a range of thousands of engines is far less

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

// proto3's JSON mapping writes 64-bit integers as strings and leaves zeros out.
int64_t Int(const json& object, const char* field) {
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
  TANDEM_ASSIGN_OR_RETURN(out.key, FromBase64(kv.value("key", std::string())));
  TANDEM_ASSIGN_OR_RETURN(out.value, FromBase64(kv.value("value", std::string())));
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
    return Unavailable(std::string("etcd refused ") + what + ": " + j.value("message", j.value("error", text.substr(0, 200))));
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

StatusOr<std::string> EtcdClient::Call(const std::string& path, const std::string& body) const {
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
  bool too_big = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (answer.size() + n > kMaxAnswerBytes) return !(too_big = true);
    answer.append(data, n);
    return true;
  };
  auto res = cli.send(req);
  if (too_big) return ResourceExhausted("etcd's answer to " + path + " is over 64 MiB");
  if (!res) {
    return Unavailable("etcd at " + endpoint_.host + ":" + std::to_string(endpoint_.port) + " did not answer " + path +
                       ": " + Why(res.error()));
  }
  if (res->status != 200) {
    return Unavailable("etcd answered " + path + " with HTTP " + std::to_string(res->status) + ": " + answer.substr(0, 200));
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
  const json result = j.value("result", json::object());
  const int64_t ttl = Int(result, "TTL");
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
  out.revision = Int(j.value("header", json::object()), "revision");
  if (out.revision <= 0) return Unavailable("etcd's range answer carries no revision");
  if (auto kvs = j.find("kvs"); kvs != j.end() && kvs->is_array()) {
    for (const json& kv : *kvs) {
      TANDEM_ASSIGN_OR_RETURN(EtcdKv parsed, ParseKv(kv));
      out.kvs.push_back(std::move(parsed));
    }
  }
  return out;
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
                         {"start_revision", std::to_string(start_revision)}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = create.dump();
  req.set_header("Content-Type", "application/json");
  std::string pending;  // an answer's bytes up to its newline
  bool created = false;
  Status outcome = Status::Ok();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (stop.load()) return false;
    pending.append(data, n);
    if (pending.size() > kMaxAnswerBytes) {
      outcome = ResourceExhausted("an etcd watch answer is over 64 MiB");
      return false;
    }
    for (size_t newline; (newline = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      auto j = ParseAnswer(line, "a watch");
      if (!j.ok()) return (outcome = j.status()), false;
      const json result = j->value("result", json::object());
      if (result.value("created", false)) created = true;
      if (result.value("canceled", false)) {
        const int64_t compacted = Int(result, "compact_revision");
        outcome = compacted > 0 ? OutOfRange("the watch's revision " + std::to_string(start_revision) +
                                             " was compacted (now " + std::to_string(compacted) + ")")
                                : Unavailable("etcd cancelled the watch: " + result.value("cancel_reason", std::string("no reason given")));
        return false;
      }
      std::vector<EtcdEvent> events;
      if (auto list = result.find("events"); list != result.end() && list->is_array()) {
        for (const json& e : *list) {
          EtcdEvent event;
          event.deleted = e.value("type", std::string()) == "DELETE";
          auto kv = ParseKv(e.value("kv", json::object()));
          if (!kv.ok()) return (outcome = kv.status()), false;
          event.kv = std::move(kv).value();
          events.push_back(std::move(event));
        }
      }
      const int64_t revision = Int(result.value("header", json::object()), "revision");
      if (!events.empty() && !on_events(events, revision)) return false;
    }
    return true;
  };
  auto res = cli.send(req);
  if (!outcome.ok()) return outcome;
  if (!res && !created) {
    return Unavailable("etcd at " + endpoint_.host + ":" + std::to_string(endpoint_.port) +
                       " did not open a watch: " + Why(res.error()));
  }
  return Status::Ok();  // stopped, idle, or the stream ended: the caller ranges again
}

}  // namespace tandem::discovery
