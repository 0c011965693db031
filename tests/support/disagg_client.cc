#include "support/disagg_client.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <thread>

#include "support/http_client.h"
#include "support/wait.h"

namespace tandem::testing {

using json = nlohmann::json;

std::string Complete(int port, const std::vector<int32_t>& prompt, int max_tokens, int* status) {
  auto r = HttpPost(port, "/v1/completions",
                    json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}}.dump());
  if (status) *status = r.status;
  if (r.status != 200) return "HTTP " + std::to_string(r.status) + ": " + r.body;
  return json::parse(r.body)["choices"][0]["text"].get<std::string>();
}

std::vector<int32_t> Prompt(int i) {
  std::vector<int32_t> p(size_t(40 + 23 * i));
  for (size_t k = 0; k < p.size(); ++k) p[k] = int32_t(3 + (k * 131 + size_t(i) * 17) % 1000);
  return p;
}

std::vector<std::string> Conversation(int port, int i) {
  std::string topic = "conversation " + std::to_string(i) + ":";
  for (int w = 0; w < 20 + i * 3; ++w) topic += " word" + std::to_string((w * 7 + i) % 50);
  json body = {{"messages", json::array({{{"role", "user"}, {"content", topic}}})}, {"max_tokens", 16}, {"temperature", 0}};
  std::vector<std::string> answers;
  for (int turn = 0; turn < 2; ++turn) {
    auto r = HttpPost(port, "/v1/chat/completions", body.dump());
    if (r.status != 200) return {"HTTP " + std::to_string(r.status) + ": " + r.body};
    const std::string answer = json::parse(r.body)["choices"][0]["message"]["content"];
    answers.push_back(answer);
    body["messages"].push_back({{"role", "assistant"}, {"content", answer}});
    body["messages"].push_back({{"role", "user"}, {"content", "and then? " + std::to_string(turn)}});
  }
  return answers;
}

std::map<std::string, double> WaitForBaseline(int port, std::chrono::milliseconds timeout, bool* ok) {
  std::map<std::string, double> m;
  *ok = WaitUntil(
      [&] {
        m = ParseMetrics(HttpGet(port, "/metrics").body);
        return m["tandem_requests_running"] + m["tandem_requests_waiting"] == 0 &&
               m["tandem_handoff_quarantined_pages"] == 0 && m["tandem_handoffs_in_flight"] == 0 &&
               m["tandem_cache_pages{state=\"reserved\"}"] == 0 &&
               m["tandem_cache_pages{state=\"used\"}"] == m["tandem_prefix_cache_pages"];
      },
      timeout, std::chrono::milliseconds(20));
  return m;
}

int LinksUp(const std::string& decode_log) {
  int n = 0;
  for (size_t at = decode_log.find(") is up"); at != std::string::npos; at = decode_log.find(") is up", at + 1)) ++n;
  return n;
}

long long NumberAfter(const std::string& log, const std::string& key) {
  const size_t at = log.rfind(key);
  if (at == std::string::npos) return -1;
  return std::atoll(log.c_str() + at + key.size());
}

}  // namespace tandem::testing

namespace tandem::testing {

std::vector<std::string> SparseArgs(const std::string& dtype) {
  return {"--attention", "sparse", "--topk", "32", "--index-k-dtype", dtype};
}

std::string Loopback(int port) { return "127.0.0.1:" + std::to_string(port); }

std::unique_ptr<ServerProcess> StartPrefill(const std::string& model, const std::string& dtype,
                                            std::vector<std::string> extra, int fixed_port) {
  std::vector<std::string> a = {"prefill", "-m", model, "--chunk-size", "100"};
  for (auto& x : SparseArgs(dtype)) a.push_back(x);
  a.insert(a.end(), extra.begin(), extra.end());
  const bool tcp = std::find(a.begin(), a.end(), "tcp") != a.end();
  return std::make_unique<ServerProcess>(a, 60, tcp ? "tcp://127.0.0.1:" : "ucx://127.0.0.1:", fixed_port);
}

std::unique_ptr<ServerProcess> StartServe(const std::string& model, const std::string& dtype,
                                          const std::string& prefill, std::vector<std::string> extra,
                                          int fixed_port) {
  std::vector<std::string> a = {"serve", "-m", model, "--model-id", "tiny", "--request-timeout", "60"};
  for (auto& x : SparseArgs(dtype)) a.push_back(x);
  a.insert(a.end(), extra.begin(), extra.end());
  if (!prefill.empty()) a.insert(a.end(), {"--prefill", prefill});
  // These tests check the links: a decode server that computed prompts itself
  // would hide a link's failure (local prefill has tests of its own).
  if (!prefill.empty() && std::find(a.begin(), a.end(), "--local-prefill") == a.end()) {
    a.push_back("--no-local-prefill");
  }
  std::erase(a, std::string("--local-prefill"));
  return std::make_unique<ServerProcess>(a, 60, "http://127.0.0.1:", fixed_port);
}

}  // namespace tandem::testing
