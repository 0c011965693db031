// Abort storm: many handoffs in flight, half aborted mid-way, ten rounds.
// Afterwards nothing is quarantined or reserved, both pools are back at
// baseline, and a clean round succeeds completely — without any restart.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <set>
#include <thread>

#include "model/numerics.h"
#include "prefill/prefill_server.h"
#include "support/test_models.h"
#include "support/tiny_model.h"
#include "decode/handoff_receiver.h"
#include "transfer/handshake.h"
#include "transfer/loopback.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;

// On the tiny llama model and on dsa-tiny (deepseek32: kv_latent + index_k).
class AbortStorm : public ::testing::TestWithParam<std::string> {};

TEST_P(AbortStorm, HalfAbortedTenRoundsThenACleanRound) {
  auto m = testing::MakePresetModel(GetParam(), TensorType::kF32);
  const Model& model = *m->model;
  const CacheSpec spec = *MakeCacheSpec(model.config(), [] {
    AttentionOptions a;
    a.kind = AttentionKind::kSparse;
    a.top_k = 16;
    return a;
  }());
  const int layers = int(model.config().n_layers);
  const int64_t pages = 256;
  auto net = std::make_shared<LoopbackNetwork>(LoopbackOptions{200us, 0us});
  LoopbackTransport decode_t(net);
  Region region = *decode_t.AllocateRegion(size_t(CacheLayout(spec.registry, layers, pages).TotalBytes()));
  PagePool decode_pool(spec.registry, layers, pages, region.data);
  const auto decode_baseline = decode_pool.accounting();
  HandoffReceiver receiver(decode_pool, region.key, nullptr, {});
  // The receiver belongs to one thread: messages are queued for the test thread.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<uint8_t>> to_decode;
  // The prefill engine (small chunks: many steps per handoff, so aborts land mid-way).
  PrefillOptions po;
  po.engine.attention.kind = AttentionKind::kSparse;
  po.engine.attention.top_k = 16;
  po.engine.cache_tokens = pages * kPageTokens;
  po.engine.chunk_size = 4;
  po.engine.threads = 1;
  po.peer_timeout = std::chrono::minutes(10);  // this decode side sends no heartbeats
  auto server = std::move(PrefillServer::Create(model, po, std::make_unique<LoopbackTransport>(net))).value();
  PrefillEngine* worker = &server->engine();
  ASSERT_TRUE(server->Listen("p").ok());
  ConnectionHandlers decode_handlers;
  decode_handlers.on_message = [&](Connection&, std::vector<uint8_t> b) {
    std::lock_guard<std::mutex> lock(mu);
    to_decode.push_back(std::move(b));
    cv.notify_all();
  };
  auto conn = decode_t.Connect("p", decode_handlers);
  ASSERT_TRUE(conn.ok());
  std::shared_ptr<Connection> decode_side = *conn;
  const uint64_t instance = NewInstanceId();
  ASSERT_TRUE(decode_side->Send(Hello{"decode", decode_pool.layout().Fingerprint() + ";" + AttentionFingerprint(spec.attention),
                                      WeightsIdentity(model), instance, 0, {}, {}, {}, HandshakeNumerics()}
                                    .Encode())
                  .ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return !to_decode.empty(); })) << "no Hello from the prefill engine";
    ASSERT_EQ(*PeekType(to_decode.front()), MessageType::kHello);
    to_decode.pop_front();
  }

  uint64_t next_id = 1;
  auto round = [&](bool abort_half) {
    std::set<uint64_t> open;
    std::vector<uint64_t> ids;
    for (int i = 0; i < 8; ++i) {
      const uint64_t id = next_id++;
      auto d = receiver.Begin(id, testing::PseudoRandomTokens(size_t(100 + 13 * i), model.config().vocab_size, uint32_t(id)), 1, Clock::now());
      EXPECT_TRUE(d.ok()) << d.status().ToString();
      d->time_budget_ms = 60000;
      d->decode_instance_id = instance;
      EXPECT_TRUE(decode_side->Send(d->Encode()).ok());
      open.insert(id);
      ids.push_back(id);
    }
    int committed = 0;
    if (abort_half) {
      // Once the prefill engine has taken all eight (some running, some
      // queued), abort every other one.
      for (const auto until = Clock::now() + 20s; worker->stats().in_flight < 8 && Clock::now() < until;) {
        std::this_thread::yield();
      }
      for (size_t i = 0; i < ids.size(); i += 2) {
        auto abort = receiver.StartAbort(ids[i], AbortCode::kCancelled, "client gone", Clock::now());
        if (abort.ok()) {
          EXPECT_TRUE(decode_side->Send(abort->Encode()).ok());
        }
      }
    }
    const auto until = Clock::now() + 30s;
    while (receiver.open_handoffs() > 0 || receiver.stats().quarantined_pages > 0) {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_until(lock, until, [&] { return !to_decode.empty(); })) break;
      auto bytes = std::move(to_decode.front());
      to_decode.pop_front();
      lock.unlock();
      const auto type = PeekType(bytes);
      if (*type == MessageType::kCommit) {
        auto ready = receiver.OnCommit(*Commit::Decode(bytes), 1, Clock::now());
        if (ready.ok()) {
          ++committed;
          decode_pool.Release(ready->pages);
        }
      } else if (*type == MessageType::kAbortAck) {
        receiver.OnAbortAck(AbortAck::Decode(bytes)->handoff_id, 1);
      }
    }
    return committed;
  };
  for (int r = 0; r < 10; ++r) {
    const int committed = round(true);
    EXPECT_GE(committed, 4) << "round " << r << ": the un-aborted half commits";
    EXPECT_EQ(receiver.open_handoffs(), 0u) << "round " << r;
    EXPECT_EQ(receiver.stats().quarantined_pages, 0) << "round " << r;
    EXPECT_EQ(decode_pool.accounting(), decode_baseline) << "round " << r;
  }
  EXPECT_GT(receiver.stats().aborted, 0);
  EXPECT_EQ(round(false), 8) << "a clean round after the storm succeeds completely";
  EXPECT_EQ(decode_pool.accounting(), decode_baseline);
  // Nothing of the prefill pool is held beyond its prefix cache.
  PrefillEngine::Stats ps = worker->stats();
  for (const auto until = Clock::now() + 10s; (ps.in_flight > 0 || ps.pages_in_use > 0) && Clock::now() < until;) {
    std::this_thread::yield();
    ps = worker->stats();
  }
  EXPECT_EQ(ps.pages_in_use, 0);
  EXPECT_EQ(ps.in_flight, 0);
  server->Stop();
}

INSTANTIATE_TEST_SUITE_P(Models, AbortStorm, tandem::testing::kTestModels, tandem::testing::ModelInstanceName);

}  // namespace
}  // namespace tandem::transfer
