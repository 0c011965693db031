#include "bench/serve.h"

#include <cstdio>
#include <future>
#include <memory>

#include "common/env.h"
#include "loadgen/stream_client.h"
#include "server/http_server.h"

namespace tandem::bench {
namespace {

std::string Prompt(int client, int request, int words) {
  static const char* kWords[] = {"river", "lantern", "quiet", "engine", "paper", "orbit", "garden",
                                 "signal", "window", "harbor", "copper", "meadow", "thread", "summit"};
  std::string p = "Request " + std::to_string(client) + "." + std::to_string(request) + ":";
  for (int w = 0; w < words; ++w) p += std::string(" ") + kWords[(client * 7 + request * 3 + w * 5) % 14];
  return p;
}

void RunLevel(const std::string& host, int port, const ServeBenchOptions& a, int clients) {
  std::vector<std::future<std::vector<StreamTiming>>> futures;
  const auto t0 = Env::Default().Now();
  for (int c = 0; c < clients; ++c) {
    futures.push_back(std::async(std::launch::async, [&, c] {
      std::vector<StreamTiming> out;
      for (int r = 0; r < a.requests_per_client; ++r) {
        nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", Prompt(c, r, a.prompt_words)}}}},
                               {"max_tokens", a.max_tokens}, {"temperature", 0}};
        out.push_back(StreamChat(host, port, body, 600));
      }
      return out;
    }));
  }
  std::vector<double> ttft, gaps, e2e;
  int64_t tokens = 0, ok = 0, failed = 0;
  for (auto& f : futures) {
    for (const StreamTiming& t : f.get()) {
      if (t.status != 200 || !t.error.empty()) {
        ++failed;
        continue;
      }
      ++ok;
      ttft.push_back(t.ttft_s);
      e2e.push_back(t.e2e_s);
      gaps.insert(gaps.end(), t.gaps_s.begin(), t.gaps_s.end());
      tokens += t.completion_tokens;
    }
  }
  const double wall = std::chrono::duration<double>(Env::Default().Now() - t0).count();
  std::printf("%5d %6lld %4lld | %8.2f %9.1f | %8.1f %8.1f %8.1f | %7.1f %7.1f %7.1f | %8.2f\n", clients,
              (long long)ok, (long long)failed, double(ok) / wall, double(tokens) / wall,
              Percentile(ttft, 50) * 1e3, Percentile(ttft, 90) * 1e3, Percentile(ttft, 99) * 1e3,
              Percentile(gaps, 50) * 1e3, Percentile(gaps, 90) * 1e3, Percentile(gaps, 99) * 1e3,
              Percentile(e2e, 50));
  std::fflush(stdout);
}

}  // namespace

int RunServeBench(ServeBenchOptions& a) {
  std::unique_ptr<Model> model;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<HttpServer> server;
  std::string host = "127.0.0.1";
  int port = 0;
  if (a.url.empty()) {
    auto m = a.model.Load();
    if (!m.ok()) return std::fprintf(stderr, "error: %s\n", m.status().ToString().c_str()), 1;
    model = std::move(m).value();
    EngineOptions eo;
    eo.threads = a.model.threads;
    auto e = Engine::Create(*model, eo);
    if (!e.ok()) return std::fprintf(stderr, "error: %s\n", e.status().ToString().c_str()), 1;
    engine = std::move(e).value();
    ServerOptions so;
    so.port = 0;
    server = std::make_unique<HttpServer>(*engine, *model, so);
    if (Status st = server->Start(); !st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    port = server->port();
    std::printf("in-process server: %s on 127.0.0.1:%d, %d threads\n", model->config().name.c_str(), port,
                a.model.threads);
  } else {
    const size_t colon = a.url.rfind(':');
    if (colon == std::string::npos) return std::fprintf(stderr, "error: --url must be host:port\n"), 1;
    host = a.url.substr(0, colon);
    port = std::atoi(a.url.c_str() + colon + 1);
  }
  std::printf("%d requests per client, ~%d-word prompts, %d max tokens, greedy, streaming\n\n",
              a.requests_per_client, a.prompt_words, a.max_tokens);
  std::printf("%5s %6s %4s | %8s %9s | %8s %8s %8s | %7s %7s %7s | %8s\n", "conc", "ok", "fail", "req/s",
              "tok/s", "TTFTp50", "TTFTp90", "TTFTp99", "ITLp50", "ITLp90", "ITLp99", "E2Ep50 s");
  std::printf("%5s %6s %4s | %8s %9s | %8s %8s %8s | %7s %7s %7s |\n", "", "", "", "", "", "ms", "ms", "ms",
              "ms", "ms", "ms");
  for (int c : a.concurrency) RunLevel(host, port, a, c);
  if (server) server->Stop();
  if (engine) engine->Shutdown(std::chrono::milliseconds(0));
  return 0;
}

}  // namespace tandem::bench
