// The server-state half of the agentic load generator: probing /health and
// /metrics (a router's backends included), the health gate, and /v1/models.
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "common/env.h"
#include "loadgen/agentic.h"

namespace tandem {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Sample {
  std::string name, labels;
  double value = 0;
};

std::vector<Sample> ParseMetricsText(const std::string& text) {
  std::vector<Sample> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    if (brace != std::string::npos && brace < space) {
      const size_t close = line.find('}', brace);
      if (close == std::string::npos) continue;
      s.name = line.substr(0, brace);
      s.labels = line.substr(brace + 1, close - brace - 1);
    } else {
      s.name = line.substr(0, line.find(' '));
    }
    s.value = std::strtod(line.c_str() + space + 1, nullptr);
    if (!std::isfinite(s.value)) continue;
    out.push_back(std::move(s));
  }
  return out;
}

bool GetText(const std::string& host, int port, const std::string& path, int* status, std::string* body) {
  httplib::Client cli(host, port);
  cli.set_connection_timeout(std::chrono::seconds(2));
  cli.set_read_timeout(std::chrono::seconds(5));
  auto res = cli.Get(path);
  if (!res) return false;
  *status = res->status;
  *body = res->body;
  return true;
}

void AddEngineMetrics(const std::vector<Sample>& samples, ServerState* s) {
  for (const Sample& m : samples) {
    const auto v = int64_t(m.value);
    if (m.name == "tandem_requests_running") {
      s->tandem = true;
      s->running += v;
    } else if (m.name == "tandem_requests_waiting") {
      s->waiting += v;
    } else if (m.name == "tandem_cache_pages" && m.labels.find("state=\"reserved\"") != std::string::npos) {
      s->reserved_pages += v;
    } else if (m.name == "tandem_cache_pages" && m.labels.find("state=\"used\"") != std::string::npos) {
      s->used_pages += v;
    } else if (m.name == "tandem_prefix_cache_pages") {
      s->prefix_pages += v;
    } else if (m.name == "tandem_handoffs_in_flight") {
      s->handoffs_in_flight += v;
    } else if (m.name == "tandem_handoff_quarantined_pages") {
      s->quarantined_pages += v;
    } else if (m.name == "tandem_handoff_seconds_total") {
      s->handoff_s += m.value;
    } else if (m.name == "tandem_handoff_request_seconds_total") {
      s->handoff_request_s += m.value;
    } else if (m.name == "tandem_request_phase_seconds_total") {
      const size_t at = m.labels.find("phase=\"");
      if (at == std::string::npos) continue;
      const size_t end = m.labels.find('"', at + 7);
      if (end != std::string::npos) s->phase_s[m.labels.substr(at + 7, end - at - 7)] += m.value;
    }
  }
}

// "host:port started at T" when the process exports its start time.
void AddInstance(const std::vector<Sample>& samples, const std::string& where, ServerState* s) {
  for (const Sample& m : samples) {
    if (m.name != "tandem_process_start_time_seconds") continue;
    char start[64];
    std::snprintf(start, sizeof(start), "%.3f", m.value);
    s->instances.push_back(where + " started at " + start);
  }
}

}  // namespace

bool ServerState::AtBaseline() const {
  if (!reachable || !healthy) return false;
  if (!tandem) return true;
  return running == 0 && waiting == 0 && reserved_pages == 0 && handoffs_in_flight == 0 &&
         quarantined_pages == 0 && used_pages == prefix_pages;
}

ServerState ProbeServer(const std::string& host, int port) {
  ServerState s;
  int status = 0;
  std::string body;
  if (!GetText(host, port, "/health", &status, &body)) {
    s.detail = "no answer from http://" + host + ":" + std::to_string(port) + "/health";
    return s;
  }
  s.reachable = true;
  s.healthy = status == 200;
  if (status != 200) s.detail += "/health answered " + std::to_string(status) + "; ";
  const bool metrics = GetText(host, port, "/metrics", &status, &body);
  if (metrics && (status == 404 || status == 501)) {
    // A server without metrics (llama-server answers 501 unless --metrics):
    // judged by /health alone, and the gate says what it could not check.
    s.unchecked = "/metrics answered " + std::to_string(status) +
                  ", so only /health was checked (not idle requests, reserved or quarantined pages)";
  } else if (!metrics || status != 200) {
    // Offered but failing (a timeout under load, a 500): not a server to measure.
    s.healthy = false;
    s.detail += std::string("/metrics ") + (metrics ? "answered " + std::to_string(status) : "did not answer") + "; ";
  } else {
    const std::vector<Sample> samples = ParseMetricsText(body);
    AddEngineMetrics(samples, &s);
    AddInstance(samples, host + ":" + std::to_string(port), &s);
    // A tandem router: gate on the decode servers behind it too.
    for (const Sample& m : samples) {
      if (m.name != "tandem_router_backend_healthy") continue;
      const std::string key = "backend=\"";
      const size_t q = m.labels.find(key);
      const size_t q2 = q == std::string::npos ? q : m.labels.find('"', q + key.size());
      if (q2 == std::string::npos) continue;
      const std::string backend = m.labels.substr(q + key.size(), q2 - q - key.size());
      if (m.value != 1) {
        s.healthy = false;
        s.detail += "backend " + backend + " is unhealthy; ";
        continue;
      }
      const size_t colon = backend.rfind(':');
      if (colon == std::string::npos) continue;
      std::string text;
      int st = 0;
      const std::string backend_host = backend.substr(0, colon);
      const int backend_port = std::atoi(backend.c_str() + colon + 1);
      // The router's view of a backend is as old as its last probe: ask the backend itself.
      if (!GetText(backend_host, backend_port, "/health", &st, &text) || st != 200) {
        s.healthy = false;
        s.detail += "backend " + backend + " /health is not 200; ";
        continue;
      }
      if (!GetText(backend_host, backend_port, "/metrics", &st, &text) || st != 200) {
        s.healthy = false;
        s.detail += "backend " + backend + " does not answer /metrics; ";
        continue;
      }
      const std::vector<Sample> backend_samples = ParseMetricsText(text);
      AddEngineMetrics(backend_samples, &s);
      AddInstance(backend_samples, backend, &s);
    }
  }
  if (s.tandem) {
    auto note = [&](int64_t v, const char* what) {
      if (v != 0) s.detail += std::to_string(v) + " " + what + "; ";
    };
    note(s.running, "requests running");
    note(s.waiting, "requests waiting");
    note(s.reserved_pages, "pages reserved");
    note(s.handoffs_in_flight, "handoffs in flight");
    note(s.quarantined_pages, "pages quarantined by aborted handoffs");
    if (s.used_pages != s.prefix_pages) {
      s.detail += std::to_string(s.used_pages) + " pages used but only " + std::to_string(s.prefix_pages) +
                  " held by the prefix cache; ";
    }
  }
  if (s.detail.size() >= 2) s.detail.resize(s.detail.size() - 2);
  return s;
}

Status WaitForBaseline(const std::string& host, int port, double deadline_s,
                       const std::function<void(const ServerState&)>& on_poll) {
  const auto until = Env::Default().Now() + std::chrono::duration<double>(deadline_s);
  ServerState s;
  for (;;) {
    s = ProbeServer(host, port);
    if (on_poll) on_poll(s);
    if (s.AtBaseline()) return Status::Ok();
    if (Env::Default().Now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.0f", deadline_s);
  return Unavailable("the server at " + host + ":" + std::to_string(port) + " did not return to baseline within " +
                     secs + " s (" + (s.detail.empty() ? std::string("unhealthy") : s.detail) + ")");
}

Status QueryModel(const std::string& host, int port, std::string* id, Json* attention, int64_t* context,
                  std::string* chat_format, Json* numerics) {
  int status = 0;
  std::string body;
  if (!GetText(host, port, "/v1/models", &status, &body)) {
    return Unavailable("no answer from http://" + host + ":" + std::to_string(port) + "/v1/models");
  }
  if (status != 200) return Unavailable("/v1/models answered " + std::to_string(status));
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return InvalidArgument("/v1/models did not list a model with a string id");
  }
  const Json& m = j["data"][0];
  *id = m["id"].get<std::string>();
  *attention = Json();
  if (m.contains("tandem") && m["tandem"].is_object() && m["tandem"].contains("attention")) {
    *attention = m["tandem"]["attention"];
  }
  if (chat_format != nullptr) {
    const bool said = m.contains("tandem") && m["tandem"].is_object() && m["tandem"].contains("chat_format") &&
                      m["tandem"]["chat_format"].is_string();
    *chat_format = said ? m["tandem"]["chat_format"].get<std::string>() : std::string();
  }
  if (numerics != nullptr) {
    const bool said = m.contains("tandem") && m["tandem"].is_object() && m["tandem"].contains("numerics") &&
                      m["tandem"]["numerics"].is_object();
    *numerics = said ? m["tandem"]["numerics"] : Json();
  }
  *context = m.contains("context_length") && m["context_length"].is_number_integer() ? m["context_length"].get<int64_t>() : 0;
  return Status::Ok();
}

// ---------------------------------------------------------------- running

}  // namespace tandem
