// Abort storm: many handoffs in flight, half aborted mid-way, ten rounds.
// Afterwards nothing is quarantined or reserved, both pools are back at
// baseline, and a clean round succeeds completely — without any restart.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <set>
#include <thread>

#include "support/test_models.h"
#include "transfer/handoff_receiver.h"
#include "transfer/handoff_sender.h"
#include "transfer/loopback.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;

// The prefill side as a message-driven worker: Destinations queue up; an
// Abort stops the running handoff, drops a queued one, and is acknowledged
// in every case (after a commit there is nothing in flight to wait for).
class PrefillWorker {
 public:
  PrefillWorker(const Model& model, const CacheSpec& spec, PagePool& pool, std::shared_ptr<Connection> conn,
                RemoteKey key)
      : sender_(model, spec, threads_, pool, SenderOptions{4, {}, false, true, {}}), conn_(std::move(conn)), key_(std::move(key)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~PrefillWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnMessage(const std::vector<uint8_t>& bytes) {
    auto type = PeekType(bytes);
    if (!type.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (*type == MessageType::kDestination) {
      queue_.push_back(*Destination::Decode(bytes));
    } else if (*type == MessageType::kAbort) {
      const uint64_t id = Abort::Decode(bytes)->handoff_id;
      if (id == running_) {
        sender_.RequestAbort(id);  // acked when Run returns
      } else {
        const auto before = queue_.size();
        std::erase_if(queue_, [&](const Destination& d) { return d.handoff_id == id; });
        (void)before;
        (void)conn_->Send(AbortAck{id}.Encode());
      }
    }
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      Destination d = std::move(queue_.front());
      queue_.pop_front();
      running_ = d.handoff_id;
      sender_.ClearAbort();
      lock.unlock();
      auto commit = sender_.Run(d, key_, *conn_);
      if (!commit.ok() && commit.status().code() == StatusCode::kAborted) (void)conn_->Send(AbortAck{d.handoff_id}.Encode());
      lock.lock();
      running_ = 0;
    }
  }

  ThreadPool threads_{1};
  HandoffSender sender_;
  std::shared_ptr<Connection> conn_;
  RemoteKey key_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Destination> queue_;
  uint64_t running_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

TEST(AbortStorm, HalfAbortedTenRoundsThenACleanRound) {
  auto m = testing::MakePresetModel("tiny", TensorType::kF32);
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
  LoopbackTransport decode_t(net), prefill_t(net);
  Region region = *decode_t.AllocateRegion(size_t(CacheLayout(spec.registry, layers, pages).TotalBytes()));
  PagePool decode_pool(spec.registry, layers, pages, region.data), prefill_pool(spec.registry, layers, pages);
  const auto decode_baseline = decode_pool.accounting();
  HandoffReceiver receiver(decode_pool, region.key, nullptr, {});
  // The receiver belongs to one thread: messages are queued for the test thread.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<uint8_t>> to_decode;
  std::unique_ptr<PrefillWorker> worker;
  std::shared_ptr<Connection> decode_side;
  ASSERT_TRUE(decode_t.Listen("d", [&](std::shared_ptr<Connection> c) {
                decode_side = c;
                ConnectionHandlers h;
                h.on_message = [&](Connection&, std::vector<uint8_t> b) {
                  std::lock_guard<std::mutex> lock(mu);
                  to_decode.push_back(std::move(b));
                  cv.notify_all();
                };
                return h;
              }).ok());
  ConnectionHandlers prefill_handlers;
  prefill_handlers.on_message = [&](Connection&, std::vector<uint8_t> b) { worker->OnMessage(b); };
  auto conn = prefill_t.Connect("d", prefill_handlers);
  ASSERT_TRUE(conn.ok());
  worker = std::make_unique<PrefillWorker>(model, spec, prefill_pool, *conn, region.key);

  uint64_t next_id = 1;
  auto round = [&](bool abort_half) {
    std::set<uint64_t> open;
    std::vector<uint64_t> ids;
    for (int i = 0; i < 8; ++i) {
      const uint64_t id = next_id++;
      auto d = receiver.Begin(id, testing::PseudoRandomTokens(size_t(100 + 13 * i), 1024, uint32_t(id)), 1, Clock::now());
      EXPECT_TRUE(d.ok()) << d.status().ToString();
      d->time_budget_ms = 60000;
      EXPECT_TRUE(decode_side->Send(d->Encode()).ok());
      open.insert(id);
      ids.push_back(id);
    }
    int committed = 0;
    if (abort_half) {
      std::this_thread::sleep_for(2ms);
      for (size_t i = 0; i < ids.size(); i += 2) {
        auto abort = receiver.StartAbort(ids[i], "client gone", Clock::now());
        if (abort.ok()) EXPECT_TRUE(decode_side->Send(abort->Encode()).ok());
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
  worker.reset();
  EXPECT_EQ(prefill_pool.free_pages(), prefill_pool.total_pages());
}

}  // namespace
}  // namespace tandem::transfer
