#include "bench/handoff.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "common/env.h"
#include "common/splitmix.h"
#include "transfer/transport_kind.h"

namespace tandem::bench {
namespace {

using transfer::Clock;

constexpr int64_t kPagesPerBatch = 32;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Env::Default().Now() - t0).count(); }

// Destination order: a fixed pseudo-random permutation (pages of a request are
// scattered over the pool).
std::vector<int64_t> Scatter(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(SplitMix64(uint64_t(i)) % uint64_t(i + 1))]);
  return order;
}

// A plain TCP socket over 127.0.0.1 moving the same pages into the same
// scattered destination: the reference for the TCP transport. GB/s, or -1.
double SocketCopyGBps(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& order, int64_t page) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    if (listener >= 0) close(listener);
    return -1;
  }
  const int out = socket(AF_INET, SOCK_STREAM, 0);
  if (out < 0 || connect(out, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(listener);
    if (out >= 0) close(out);
    return -1;
  }
  const int in = accept(listener, nullptr, nullptr);
  close(listener);
  const int one = 1;
  setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const auto t0 = Env::Default().Now();
  std::thread receiver([&] {
    for (size_t i = 0; i < order.size(); ++i) {
      uint8_t* at = dst + order[i] * page;
      for (int64_t got = 0; got < page;) {
        const ssize_t r = recv(in, at + got, size_t(page - got), 0);
        if (r <= 0) return;
        got += r;
      }
    }
  });
  for (size_t i = 0; i < order.size(); ++i) {
    for (int64_t sent = 0; sent < page;) {
      const ssize_t w = send(out, src + int64_t(i) * page + sent, size_t(page - sent), 0);
      if (w <= 0) break;
      sent += w;
    }
  }
  receiver.join();
  const double s = Seconds(t0);
  close(out);
  close(in);
  return double(page) * double(order.size()) / s / 1e9;
}

}  // namespace

int RunHandoffBench(const HandoffBenchOptions& a) {
  auto kind = transfer::ParseTransportKind(a.transport);
  if (!kind.ok()) return std::fprintf(stderr, "error: %s\n", kind.status().message().c_str()), 1;
  const bool tcp = *kind == transfer::TransportKind::kTcp;
  auto server = transfer::MakeTransport(*kind);
  auto client = transfer::MakeTransport(*kind);
  if (!server.ok() || !client.ok()) {
    std::fprintf(stderr, "error: %s\n", (!server.ok() ? server.status() : client.status()).ToString().c_str());
    return 1;
  }
  std::printf("put + flush of scattered pages, 127.0.0.1 (--transport %s, UCX_TLS=%s), vs single-threaded "
              "page-scatter memcpy%s\n\n",
              a.transport.c_str(), std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "default",
              tcp ? " and a plain TCP socket moving the same pages" : "");
  std::printf("%10s %8s | %12s %12s | %6s", "page bytes", "pages", "memcpy GB/s", "handoff GB/s", "ratio");
  std::printf(tcp ? " | %12s %9s\n" : "\n", "socket GB/s", "vs socket");
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
    double best_copy = 0, best_put = 0, best_socket = 0;
    for (int r = 0; r < a.rounds; ++r) {
      if (tcp) best_socket = std::max(best_socket, SocketCopyGBps(src, local.data(), order, page));
      auto t0 = Env::Default().Now();
      for (int64_t i = 0; i < a.pages; ++i) {
        std::memcpy(local.data() + order[size_t(i)] * page, src + i * page, size_t(page));
      }
      best_copy = std::max(best_copy, double(total) / Seconds(t0) / 1e9);
      // As the prefill engine posts them: one PutMany per layer's pages of a request.
      t0 = Env::Default().Now();
      std::vector<transfer::PutOp> ops;
      for (int64_t i = 0; i < a.pages; i += kPagesPerBatch) {
        ops.clear();
        for (int64_t j = i; j < std::min(a.pages, i + kPagesPerBatch); ++j) {
          ops.push_back({src + j * page, size_t(page), uint64_t(order[size_t(j)] * page)});
        }
        Status st = (*conn)->PutMany(ops, region->key);
        if (!st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
      }
      Status st = (*conn)->Flush(Env::Default().Now() + std::chrono::seconds(60));
      if (!st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
      best_put = std::max(best_put, double(total) / Seconds(t0) / 1e9);
    }
    const bool intact = std::memcmp(region->data + order[7] * page, src + 7 * page, size_t(page)) == 0;
    std::printf("%10lld %8lld | %12.2f %12.2f | %6.2f", (long long)page, (long long)a.pages, best_copy, best_put,
                best_put / best_copy);
    if (tcp) std::printf(" | %12.2f %9.2f", best_socket, best_put / best_socket);
    std::printf("%s\n", intact ? "" : "  (DATA MISMATCH)");
    (*conn)->Close();
  }
  std::printf("\nbest of %d rounds each, %lld pages per PutMany; both sides in this process, each with its own UCX worker\n"
              "(over shared memory UCX maps the region here: a put is then a copy, ucp_rkey_ptr).\n",
              a.rounds, (long long)kPagesPerBatch);
  return 0;
}

}  // namespace tandem::bench
