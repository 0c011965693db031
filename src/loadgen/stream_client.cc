#include "loadgen/stream_client.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <thread>

#include "common/env.h"
#include "server/openai_api.h"

namespace tandem {

using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Env::Default().Now() - t0).count(); }

using Json = nlohmann::json;

// Servers are untrusted: every field is read only when it has the expected type.
int64_t IntOr(const Json& o, const char* key, int64_t fallback) {
  auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string ErrorMessage(const Json& e, const std::string& fallback) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object()) {
    auto m = e.find("message");
    if (m != e.end() && m->is_string()) return m->get<std::string>();
  }
  return fallback;
}

// One "data: {json}" frame.
void ParseFrame(const Json& j, StreamTiming& t, Clock::time_point t0, Clock::time_point& last) {
  if (!j.is_object()) {
    t.error = "a stream frame is not a JSON object";
    return;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    t.error = ErrorMessage(*e, "error");
    // A deadline the server enforced mid-stream is a timeout, not an error.
    if (e->is_object() && e->contains("code") && (*e)["code"] == "timeout") t.server_timeout = true;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    t.prompt_tokens = IntOr(*u, "prompt_tokens", 0);
    t.completion_tokens = IntOr(*u, "completion_tokens", 0);
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) {
      t.cached_tokens = IntOr(*d, "cached_tokens", 0);
    }
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return;
  for (const auto& c : *choices) {
    if (!c.is_object()) continue;
    if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) t.finish_reason = f->get<std::string>();
    bool new_tokens = false;
    if (auto ids = c.find("token_ids"); ids != c.end() && ids->is_array()) {
      t.has_token_ids = true;
      for (const auto& id : *ids) {
        if (!id.is_number_integer()) {
          t.error = "token_ids holds a value that is not an integer";
          continue;
        }
        t.token_ids.push_back(id.get<int32_t>());
      }
      new_tokens = !ids->empty();
    }
    if (new_tokens && t.ttft_s == 0 && t.text.empty()) {
      t.ttft_s = std::chrono::duration<double>(Env::Default().Now() - t0).count();
      last = Env::Default().Now();
    }
    auto delta = c.find("delta");
    if (delta == c.end() || !delta->is_object()) continue;
    auto content = delta->find("content");
    if (content == delta->end() || !content->is_string()) continue;
    const std::string& piece = content->get_ref<const std::string&>();
    if (piece.empty()) continue;
    const auto now = Env::Default().Now();
    if (t.text.empty()) {
      if (t.ttft_s == 0) t.ttft_s = std::chrono::duration<double>(now - t0).count();
    } else {
      t.gaps_s.push_back(std::chrono::duration<double>(now - last).count());
    }
    last = now;
    t.text += piece;
  }
}

// Consumes complete "data: ..." lines from buf. A frame that is not JSON
// makes the answer an error: dropping it would shorten the answer silently.
void ParseFrames(std::string& buf, StreamTiming& t, Clock::time_point t0, Clock::time_point& last) {
  size_t nl;
  while ((nl = buf.find('\n')) != std::string::npos) {
    std::string line = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    const auto j = Json::parse(line.substr(6), nullptr, false);
    if (j.is_discarded()) {
      t.error = "a stream frame is not valid JSON: " + line.substr(0, 120);
      continue;
    }
    ParseFrame(j, t, t0, last);
  }
}

// A traced stream (server/openai_api.h, StreamTrace): its data events are
// taken only with the trace that ends their write, so what was taken is
// exactly what the traces say was delivered — what a resume asks after.
struct Traced {
  std::optional<uint64_t> id;
  int64_t created = 0;
  std::vector<int32_t> tokens;
  bool opened = false, finished = false, done = false;
  std::vector<std::string> pending;  // data lines waiting for their trace
  bool seen = false, untraced = false;  // untraced: the server sends no trace (not tandem): parsed as it comes

  // Takes the complete events in buf.
  void Consume(std::string& buf, StreamTiming& t, Clock::time_point t0, Clock::time_point& last) {
    if (untraced) return ParseFrames(buf, t, t0, last);
    size_t at = 0;
    for (size_t end; (end = buf.find("\n\n", at)) != std::string::npos; at = end + 2) {
      const std::string_view event = std::string_view(buf).substr(at, end - at);
      std::optional<StreamTrace> trace = ParseStreamTrace(event);
      if (!seen && !trace) {
        untraced = true;
        buf.erase(0, at);
        return ParseFrames(buf, t, t0, last);
      }
      seen = true;
      if (trace) {
        if (trace->id && !id) id = trace->id, created = trace->created;
        for (const auto& c : trace->choices) {
          if (c.index != 0) continue;
          tokens.insert(tokens.end(), c.tokens.begin(), c.tokens.end());
          opened = opened || c.opened;
          finished = finished || c.finished;
        }
        for (const std::string& line : pending) {
          if (line == "data: [DONE]") {
            done = true;
            continue;
          }
          std::string one = line + "\n";
          ParseFrames(one, t, t0, last);
        }
        pending.clear();
      } else if (event.substr(0, 6) == "data: ") {
        pending.emplace_back(event);
      }
    }
    buf.erase(0, at);
  }

  Json Resume() const {
    return {{"id", *id},
            {"created", created},
            {"choices", Json::array({{{"tokens", tokens}, {"started", opened}, {"done", finished}}})}};
  }
};

}  // namespace

StreamTiming StreamChat(const std::string& host, int port, nlohmann::json body, double timeout_s,
                        double resume_within_s) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const bool resumable = resume_within_s > 0 && body.value("n", 1) == 1;
  if (resumable) {
    body["tandem_trace"] = true;
    // A resume through another router continues with the seed it began with.
    if (!body.contains("seed") || !body["seed"].is_number_integer()) {
      std::random_device rd;
      body["seed"] = (uint64_t(rd()) << 21 ^ rd()) & ((uint64_t(1) << 53) - 1);
    }
  }
  StreamTiming t;
  Traced traced;
  const auto t0 = Env::Default().Now();
  auto last = t0;
  std::optional<Clock::time_point> broke;  // when the stream last broke off
  for (;;) {
    httplib::Client cli(host, port);
    const double left = std::max(0.001, timeout_s - Since(t0));
    cli.set_connection_timeout(std::chrono::milliseconds(int64_t(std::min(left, 5.0) * 1000)));
    cli.set_read_timeout(std::chrono::milliseconds(int64_t(left * 1000)));
    cli.set_write_timeout(std::chrono::milliseconds(int64_t(left * 1000)));
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    Json attempt = body;
    if (traced.id) attempt["tandem_resume"] = traced.Resume();
    traced.pending.clear();  // data of a write whose trace never came: not delivered
    const size_t delivered_before = traced.tokens.size();
    req.body = attempt.dump();
    req.set_header("Content-Type", "application/json");
    std::string buf;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      buf.append(data, n);
      if (resumable) {
        traced.Consume(buf, t, t0, last);
      } else {
        ParseFrames(buf, t, t0, last);
      }
      return Since(t0) < timeout_s;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = cli.send(req, res, err);
    t.e2e_s = Since(t0);
    t.status = res.status > 0 ? res.status : 0;
    // Broke off: no answer, a restarting router's 502/503, or a stream that
    // ended without [DONE] (and without an error of its own).
    const bool stream_cut = t.status == 200 && !traced.done && !traced.untraced && t.error.empty();
    const bool refused = !ok && t.status == 0;
    const bool unavailable = (t.status == 502 || t.status == 503) && !traced.opened;
    if (traced.tokens.size() > delivered_before) broke.reset();  // it made progress: a new break gets the whole window
    if (resumable && (stream_cut || refused || unavailable) && t.e2e_s < timeout_s &&
        (traced.id || !traced.opened)) {
      if (!broke) broke = Env::Default().Now();
      if (Since(*broke) < resume_within_s) {
        ++t.resumes;
        t.error.clear();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
    }
    if (!ok && t.error.empty()) t.error = "connection error: " + httplib::to_string(err);
    if (resumable && t.status == 200 && !traced.done && !traced.untraced && t.error.empty()) {
      t.error = "the stream ended without [DONE]";
    }
    // Canceled: our receiver stopped at timeout_s. A failed read is a timeout
    // only when the time is up (a peer that crashed mid-answer is an error).
    t.timed_out = t.e2e_s >= timeout_s || t.status == 504 || t.server_timeout ||
                  (!ok && err == httplib::Error::Canceled);
    if (t.status >= 400 && t.error.empty()) {
      const std::string raw = res.body.empty() ? buf : res.body;  // a receiver takes the body
      const auto j = Json::parse(raw, nullptr, false);
      t.error = !j.is_discarded() && j.is_object() && j.contains("error") ? ErrorMessage(j["error"], raw) : raw;
    }
    return t;
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

}  // namespace tandem
