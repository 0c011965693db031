#include "loadgen/stream_client.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>

namespace tandem {

using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Consumes complete "data: ..." lines from buf.
void ParseFrames(std::string& buf, StreamTiming& t, Clock::time_point t0, Clock::time_point& last) {
  size_t nl;
  while ((nl = buf.find('\n')) != std::string::npos) {
    std::string line = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    const auto j = nlohmann::json::parse(line.substr(6), nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("error") && j["error"].is_object()) {
      t.error = j["error"].value("message", "error");
      // A deadline the server enforced mid-stream is a timeout, not an error.
      if (j["error"].contains("code") && j["error"]["code"] == "timeout") t.server_timeout = true;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      t.prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
      t.completion_tokens = j["usage"].value("completion_tokens", int64_t(0));
      if (j["usage"].contains("prompt_tokens_details") && j["usage"]["prompt_tokens_details"].is_object()) {
        t.cached_tokens = j["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t(0));
      }
    }
    if (!j.contains("choices")) continue;
    for (const auto& c : j["choices"]) {
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) t.finish_reason = c["finish_reason"];
      bool new_tokens = false;
      if (c.contains("token_ids") && c["token_ids"].is_array()) {
        t.has_token_ids = true;
        for (const auto& id : c["token_ids"]) {
          if (id.is_number_integer()) t.token_ids.push_back(id.get<int32_t>());
        }
        new_tokens = !c["token_ids"].empty();
      }
      if (new_tokens && t.ttft_s == 0 && t.text.empty()) {
        t.ttft_s = std::chrono::duration<double>(Clock::now() - t0).count();
        last = Clock::now();
      }
      if (!c.contains("delta") || !c["delta"].contains("content") || !c["delta"]["content"].is_string()) continue;
      const std::string piece = c["delta"]["content"];
      if (piece.empty()) continue;
      const auto now = Clock::now();
      if (t.text.empty()) {
        if (t.ttft_s == 0) t.ttft_s = std::chrono::duration<double>(now - t0).count();
      } else {
        t.gaps_s.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
      t.text += piece;
    }
  }
}

}  // namespace

StreamTiming StreamChat(const std::string& host, int port, nlohmann::json body, double timeout_s) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  StreamTiming t;
  httplib::Client cli(host, port);
  cli.set_read_timeout(std::chrono::milliseconds(int64_t(timeout_s * 1000)));
  cli.set_write_timeout(std::chrono::milliseconds(int64_t(timeout_s * 1000)));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buf;
  const auto t0 = Clock::now();
  auto last = t0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    ParseFrames(buf, t, t0, last);
    return Since(t0) < timeout_s;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(req, res, err);
  t.e2e_s = Since(t0);
  t.status = res.status > 0 ? res.status : 0;
  if (!ok && t.error.empty()) t.error = "connection error: " + httplib::to_string(err);
  t.timed_out = t.e2e_s >= timeout_s || t.status == 504 || t.server_timeout ||
                (!ok && (err == httplib::Error::Read || err == httplib::Error::Canceled));
  if (t.status >= 400 && t.error.empty()) {
    const std::string raw = res.body.empty() ? buf : res.body;  // a receiver takes the body
    const auto j = nlohmann::json::parse(raw, nullptr, false);
    t.error = !j.is_discarded() && j.contains("error") ? j["error"].value("message", raw) : raw;
  }
  return t;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

}  // namespace tandem
