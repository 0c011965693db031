#include "bench/prefill.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "common/env.h"
#include "common/splitmix.h"
#include "decode/handoff_receiver.h"
#include "model/numerics.h"
#include "prefill/prefill_server.h"
#include "prefix/prefix_index.h"
#include "transfer/handshake.h"
#include "transfer/loopback.h"

namespace tandem::bench {
namespace {

using transfer::Clock;

struct BurstResult {
  double seconds = 0;         // first Destination -> last Commit
  std::vector<double> ttft;   // per request, seconds
  int64_t new_tokens = 0, cached_tokens = 0;
  int failed = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(std::min<double>(double(v.size() - 1), p * double(v.size() - 1) + 0.5))];
}

// A decode engine reduced to what the prefill side sees: its pool in
// transport memory, a prefix cache, the receiver, one connection.
class BenchDecode {
 public:
  BenchDecode(const Model& model, const CacheSpec& spec, transfer::Transport& transport, int64_t pages)
      : region_(*transport.AllocateRegion(size_t(CacheLayout(spec.registry, int(model.config().n_layers), pages).TotalBytes()))),
        pool_(spec.registry, int(model.config().n_layers), pages, region_.data),
        index_(pool_),
        receiver_(pool_, region_.key, &index_, Options(model)) {}
  static transfer::ReceiverOptions Options(const Model& model) {
    transfer::ReceiverOptions o;
    o.vocab_size = model.config().vocab_size;
    return o;
  }
  PagePool& pool() { return pool_; }
  transfer::HandoffReceiver& receiver() { return receiver_; }
  PrefixIndex& index() { return index_; }

 private:
  transfer::Region region_;
  PagePool pool_;
  PrefixIndex index_;
  transfer::HandoffReceiver receiver_;
};

StatusOr<BurstResult> RunBurst(const Model& model, const PrefillBenchOptions& a, int32_t max_running, PrefillOrder order) {
  PrefillOptions po;
  TANDEM_ASSIGN_OR_RETURN(po.engine.attention, ParseAttentionOptions(a.attention, "bf16", 2048, "f32"));
  const int64_t per_request = a.prefix_tokens + a.new_max + kPageTokens;
  po.engine.cache_tokens = 2 * int64_t(a.requests) * per_request;  // prefixes cached + the burst in flight
  po.engine.context_tokens = per_request;  // past the model's own length when asked (as serve --ctx-size)
  po.engine.chunk_size = a.chunk_size;
  po.engine.max_batch_tokens = max_running == 1 ? a.chunk_size : a.max_batch_tokens;
  po.engine.max_running = max_running;
  po.engine.prefill_order = order;
  po.engine.threads = a.model.threads;
  po.engine.request_timeout = std::chrono::hours(1);
  po.max_queue = size_t(a.requests) * 2;
  po.peer_timeout = std::chrono::hours(1);
  auto net = std::make_shared<transfer::LoopbackNetwork>();
  TANDEM_ASSIGN_OR_RETURN(auto server,
                          PrefillServer::Create(model, po, std::make_unique<transfer::LoopbackTransport>(net)));
  PrefillEngine* prefill = &server->engine();
  const CacheSpec& spec = prefill->engine().cache_spec();
  transfer::LoopbackTransport decode_t(net);
  BenchDecode decode(model, spec, decode_t, po.engine.cache_tokens / kPageTokens);
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Clock::time_point> committed;  // guarded by mu
  int failed = 0;                                     // guarded by mu
  bool hello = false;                                 // guarded by mu
  // However this returns, the engine stops first, while the decode side still lives.
  struct StopFirst {
    PrefillServer& p;
    ~StopFirst() { p.Stop(); }
  } stop_first{*server};
  TANDEM_RETURN_IF_ERROR(server->Listen("prefill"));
  transfer::ConnectionHandlers dh;
  dh.on_message = [&](transfer::Connection&, std::vector<uint8_t> bytes) {
    auto type = PeekType(bytes);
    if (!type.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (*type == MessageType::kHello) {
      hello = true;
    } else if (*type == MessageType::kCommit) {
      auto commit = Commit::Decode(bytes);
      auto ready = decode.receiver().OnCommit(*commit, 1, Env::Default().Now());
      if (ready.ok()) {
        decode.index().Insert(ready->prompt, ready->pages);  // the decode side's prefix cache
        decode.pool().Release(ready->pages);
      } else {
        ++failed;
        std::fprintf(stderr, "handoff %llu failed: %s\n", (unsigned long long)commit->handoff_id,
                     ready.status().ToString().c_str());
      }
      committed[commit->handoff_id] = Env::Default().Now();
    } else if (*type == MessageType::kAbort) {
      auto abort = Abort::Decode(bytes);
      if (!abort.ok()) return;
      std::fprintf(stderr, "handoff %llu refused: %s\n", (unsigned long long)abort->handoff_id, abort->reason.c_str());
      (void)decode.receiver().StartAbort(abort->handoff_id, abort->code, abort->reason, Env::Default().Now());
      decode.receiver().OnAbortAck(abort->handoff_id, 1);
      ++failed;
      committed[abort->handoff_id] = Env::Default().Now();
    }
    cv.notify_all();
  };
  TANDEM_ASSIGN_OR_RETURN(auto conn, decode_t.Connect("prefill", dh));
  const uint64_t instance = transfer::NewInstanceId();
  TANDEM_RETURN_IF_ERROR(
      conn->Send(Hello{"decode", decode.pool().layout().Fingerprint() + ";" + AttentionFingerprint(spec.attention),
                       WeightsIdentity(model), instance, 0, {}, {}, {}, HandshakeNumerics()}
                     .Encode()));
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return hello; })) {
      return Unavailable("the prefill engine did not answer the Hello");
    }
  }
  // Sends every prompt at once and waits (bounded) for all of them to end.
  uint64_t next_id = 1;
  auto burst = [&](const std::vector<std::vector<int32_t>>& prompts, std::vector<Clock::time_point>* sent)
      -> StatusOr<std::vector<uint64_t>> {
    std::vector<uint64_t> ids;
    std::unique_lock<std::mutex> lock(mu);
    for (const auto& p : prompts) {
      TANDEM_ASSIGN_OR_RETURN(Destination d, decode.receiver().Begin(next_id, p, 1, Env::Default().Now()));
      d.decode_instance_id = instance;
      d.time_budget_ms = 3'600'000;
      if (sent) sent->push_back(Env::Default().Now());
      TANDEM_RETURN_IF_ERROR(conn->Send(d.Encode()));
      ids.push_back(next_id++);
    }
    const auto limit = std::chrono::minutes(30);
    if (!cv.wait_for(lock, limit, [&] { return std::all_of(ids.begin(), ids.end(), [&](uint64_t id) { return committed.count(id) > 0; }); })) {
      return Status(StatusCode::kDeadlineExceeded, "the burst did not finish within 30 minutes");
    }
    return ids;
  };
  std::vector<std::vector<int32_t>> prefixes, prompts;
  BurstResult r;
  const int32_t vocab = model.config().vocab_size;
  for (int i = 0; i < a.requests; ++i) {
    std::vector<int32_t> p(size_t(a.prefix_tokens));
    for (size_t t = 0; t < p.size(); ++t) p[t] = int32_t(SplitMix64(uint64_t(i) * 1000003u + t) % uint64_t(vocab));
    prefixes.push_back(p);
    const int64_t extra = a.new_min + int64_t(SplitMix64(0x5eed + uint64_t(i)) % uint64_t(a.new_max - a.new_min + 1));
    for (int64_t t = 0; t < extra; ++t) p.push_back(int32_t(SplitMix64(uint64_t(i) * 7919u + uint64_t(t) + 77) % uint64_t(vocab)));
    r.new_tokens += extra;
    prompts.push_back(std::move(p));
  }
  TANDEM_RETURN_IF_ERROR(burst(prefixes, nullptr).status());  // the previous round: both sides cache it
  const int64_t cached_before = prefill->stats().cached_tokens;
  {
    std::lock_guard<std::mutex> lock(mu);
    failed = 0;
  }
  std::vector<Clock::time_point> sent;
  const auto t0 = Env::Default().Now();
  TANDEM_ASSIGN_OR_RETURN(auto ids, burst(prompts, &sent));
  Clock::time_point last = t0;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto at = committed.at(ids[i]);
      last = std::max(last, at);
      r.ttft.push_back(std::chrono::duration<double>(at - sent[i]).count());
    }
    r.failed = failed;
  }
  r.seconds = std::chrono::duration<double>(last - t0).count();
  // Published after the engine's step: settle (bounded) before reading.
  for (const auto until = Env::Default().Now() + std::chrono::seconds(5);
       prefill->stats().in_flight > 0 && Env::Default().Now() < until;) {
    std::this_thread::yield();
  }
  r.cached_tokens = prefill->stats().cached_tokens - cached_before;
  return r;
}

}  // namespace

int RunPrefillBench(const PrefillBenchOptions& a) {
  if (a.new_min < 1 || a.new_max < a.new_min) {
    return std::fprintf(stderr, "error: need 1 <= --new-min <= --new-max\n"), 1;
  }
  if (a.max_running < 2) {
    return std::fprintf(stderr, "error: --max-running is the batched runs' (against one prompt at a time): at least 2\n"), 1;
  }
  auto model = a.model.Load();
  if (!model.ok()) return std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str()), 1;
  std::printf("prefill engine, %d requests at once: each %lld cached tokens + %lld..%lld new ones (%s, %d threads, "
              "%s attention)\n\n",
              a.requests, (long long)a.prefix_tokens, (long long)a.new_min, (long long)a.new_max,
              (*model)->config().name.c_str(), a.model.threads, a.attention.c_str());
  std::printf("%-28s | %13s | %10s %10s | %10s %s\n", "scheduler", "prefill tok/s", "TTFT p50", "TTFT p99",
              "cached tok", "");
  double base_rate = 0, base_p50 = 0, base_p99 = 0;
  const std::pair<int32_t, PrefillOrder> configs[] = {{1, PrefillOrder::kArrival},
                                                       {a.max_running, PrefillOrder::kArrival},
                                                       {a.max_running, PrefillOrder::kShortestFirst}};
  for (auto [running, order] : configs) {
    auto r = RunBurst(**model, a, running, order);
    if (!r.ok()) return std::fprintf(stderr, "error: %s\n", r.status().ToString().c_str()), 1;
    const double rate = double(r->new_tokens) / r->seconds, p50 = Percentile(r->ttft, 0.5),
                 p99 = Percentile(r->ttft, 0.99);
    char label[64];
    if (running == 1) {
      std::snprintf(label, sizeof(label), "one prompt at a time");
    } else {
      std::snprintf(label, sizeof(label), "batched %d, %s", running,
                    order == PrefillOrder::kArrival ? "arrival" : "shortest");
    }
    std::printf("%-28s | %13.0f | %9.2fs %9.2fs | %10lld", label, rate, p50, p99, (long long)r->cached_tokens);
    if (running == 1) {
      base_rate = rate;
      base_p50 = p50;
      base_p99 = p99;
      std::printf("\n");
    } else {
      std::printf("   %.2fx tok/s, p50 %.2fx, p99 %.2fx\n", rate / base_rate, p50 / base_p50, p99 / base_p99);
    }
    if (r->failed > 0) return std::fprintf(stderr, "error: %d handoffs failed\n", r->failed), 1;
  }
  std::printf("\nTTFT here: Destination sent -> Commit received (prefill side only; no network delay).\n");
  return 0;
}

}  // namespace tandem::bench
