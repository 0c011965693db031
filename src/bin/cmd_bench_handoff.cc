// `tandem bench handoff`: how fast the transport moves cache pages from one
// engine's memory into another's scattered pages, against a single-threaded
// page-scatter memcpy measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>

#include "bin/commands.h"
#include "common/splitmix.h"
#include "transfer/ucx.h"

namespace tandem::cli {
namespace {

using transfer::Clock;

struct HandoffBenchArgs {
  std::vector<int64_t> page_bytes = {16384, 8448};
  int64_t pages = 4096;
  int rounds = 5;
};

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Destination order: a fixed pseudo-random permutation (pages of a request are
// scattered over the pool).
std::vector<int64_t> Scatter(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(SplitMix64(uint64_t(i)) % uint64_t(i + 1))]);
  return order;
}

int RunHandoffBench(const HandoffBenchArgs& a) {
  auto server = transfer::UcxTransport::Create();
  auto client = transfer::UcxTransport::Create();
  if (!server.ok() || !client.ok()) {
    std::fprintf(stderr, "error: %s\n", (!server.ok() ? server.status() : client.status()).ToString().c_str());
    return 1;
  }
  std::printf("UCX put + flush of scattered pages, 127.0.0.1 (UCX_TLS=%s), vs single-threaded page-scatter memcpy\n\n",
              std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "default");
  std::printf("%10s %8s | %12s %12s | %6s\n", "page bytes", "pages", "memcpy GB/s", "handoff GB/s", "ratio");
  for (int64_t page : a.page_bytes) {
    const size_t total = size_t(page * a.pages);
    auto region = (*server)->AllocateRegion(total);
    if (!region.ok()) return std::fprintf(stderr, "error: %s\n", region.status().ToString().c_str()), 1;
    if ((*server)->listen_port() < 0) {
      Status st = (*server)->Listen("127.0.0.1:0", [](std::shared_ptr<transfer::Connection>) { return transfer::ConnectionHandlers{}; });
      if (!st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    }
    auto conn = (*client)->Connect("127.0.0.1:" + std::to_string((*server)->listen_port()), {});
    if (!conn.ok()) return std::fprintf(stderr, "error: %s\n", conn.status().ToString().c_str()), 1;
    // The prefill engine's pool is transport memory too (registered once).
    auto source = (*client)->AllocateRegion(total);
    if (!source.ok()) return std::fprintf(stderr, "error: %s\n", source.status().ToString().c_str()), 1;
    std::memset(source->data, 1, total);
    uint8_t* src = source->data;
    std::vector<uint8_t> local(total, 0);
    const auto order = Scatter(a.pages);
    double best_copy = 0, best_put = 0;
    for (int r = 0; r < a.rounds; ++r) {
      auto t0 = Clock::now();
      for (int64_t i = 0; i < a.pages; ++i) {
        std::memcpy(local.data() + order[size_t(i)] * page, src + i * page, size_t(page));
      }
      best_copy = std::max(best_copy, double(total) / Seconds(t0) / 1e9);
      t0 = Clock::now();
      for (int64_t i = 0; i < a.pages; ++i) {
        Status st = (*conn)->Put(src + i * page, size_t(page), region->key, uint64_t(order[size_t(i)] * page));
        if (!st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
      }
      Status st = (*conn)->Flush(Clock::now() + std::chrono::seconds(60));
      if (!st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
      best_put = std::max(best_put, double(total) / Seconds(t0) / 1e9);
    }
    const bool intact = std::memcmp(region->data + order[7] * page, src + 7 * page, size_t(page)) == 0;
    std::printf("%10lld %8lld | %12.2f %12.2f | %6.2f%s\n", (long long)page, (long long)a.pages, best_copy,
                best_put, best_put / best_copy, intact ? "" : "  (DATA MISMATCH)");
    (*conn)->Close();
  }
  std::printf("\nbest of %d rounds each; both sides in this process, each with its own UCX worker.\n", a.rounds);
  return 0;
}

}  // namespace

void RegisterHandoffBench(CLI::App& bench) {
  auto a = std::make_shared<HandoffBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("handoff", "Page transfer bandwidth over UCX vs page-scatter memcpy");
  cmd->add_option("--page-bytes", a->page_bytes, "Page sizes")->delimiter(',');
  cmd->add_option("--pages", a->pages, "Pages per round")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--rounds", a->rounds, "Rounds")->check(CLI::Range(1, 1000));
  cmd->callback([a] { SetExitCode(RunHandoffBench(*a)); });
}

}  // namespace tandem::cli
