// The prefill engine's links and handoffs over the loopback transport, one
// test per defect it once had: handoff ids matched across connections, an abort
// acknowledged after a flush that did not confirm, an unbounded queue, and
// destinations served without an accepted handshake.
#include "model/numerics.h"
#include "prefill/prefill_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <optional>
#include <thread>

#include "support/test_models.h"
#include "support/tiny_model.h"
#include "faults/faulty_connection.h"
#include "decode/handoff_receiver.h"
#include "transfer/handshake.h"
#include "transfer/loopback.h"
#include "transfer/message_auth.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;
using testing::MakePresetModel;
using transfer::Clock;
using transfer::Connection;
using transfer::ConnectionHandlers;

constexpr int64_t kPages = 64;

// One decode engine as the prefill worker sees it: a pool in transport
// memory, a receiver that makes Destinations and checks Commits, and one
// connection to the worker whose messages are collected here.
class FakeDecode {
 public:
  FakeDecode(const Model& model, const CacheSpec& spec, transfer::Transport& transport)
      : attention_(spec.attention),
        region_(*transport.AllocateRegion(size_t(CacheLayout(spec.registry, int(model.config().n_layers), kPages).TotalBytes()))),
        pool_(spec.registry, int(model.config().n_layers), kPages, region_.data),
        receiver_(pool_, region_.key, nullptr, Options(model)),
        instance_(transfer::NewInstanceId()) {}

  static transfer::ReceiverOptions Options(const Model& model) {
    transfer::ReceiverOptions o;
    o.vocab_size = model.config().vocab_size;
    return o;
  }
  void OnMessage(std::vector<uint8_t> m) {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(m));
    cv_.notify_all();
  }
  void OnClose() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  // The next message of `type` (others are skipped), or nullopt at the deadline or close.
  std::optional<std::vector<uint8_t>> Next(MessageType type, Clock::duration limit = 20s) {
    return NextOf({type}, limit);
  }
  std::optional<std::vector<uint8_t>> NextOf(std::vector<MessageType> types, Clock::duration limit = 20s) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto until = Clock::now() + limit;
    for (;;) {
      while (!inbox_.empty()) {
        auto m = std::move(inbox_.front());
        inbox_.pop_front();
        if (auth_ && !IsHello(m) && !auth_->Open(&m).ok()) continue;  // sealed after the Hellos
        if (PeekType(m).ok() && std::count(types.begin(), types.end(), *PeekType(m))) return m;
      }
      if (closed_ || !cv_.wait_until(lock, until, [&] { return !inbox_.empty() || closed_; })) {
        if (inbox_.empty()) return std::nullopt;
      }
    }
  }
  bool WaitClosed(Clock::duration limit = 20s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return closed_; });
  }
  Hello MyHello(const std::string& weights) const {
    return Hello{"decode", pool_.layout().Fingerprint() + ";" + AttentionFingerprint(attention_), weights, instance_, 0,
                 {}, {}, {}, HandshakeNumerics()};
  }
  // auth: the destination's proof of the cluster key (empty: none).
  std::vector<uint8_t> DestinationFor(uint64_t id, const std::vector<int32_t>& prompt,
                                      const std::function<std::vector<uint8_t>(const Destination&)>& auth = {}) {
    auto d = receiver_.Begin(id, prompt, 1, Clock::now());
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    d->decode_instance_id = instance_;
    d->time_budget_ms = 30000;
    if (auth) d->auth = auth(*d);
    return d->Encode();
  }
  // From the accepted Hellos on, both ways sealed (transfer/message_auth.h).
  void StartSession(const transfer::ClusterKey& key, const std::vector<uint8_t>& mine,
                    const std::vector<uint8_t>& theirs) {
    std::lock_guard<std::mutex> lock(mu_);
    auth_ = std::make_shared<transfer::MessageAuth>(key, mine, theirs, /*decode_side=*/true);
  }
  Status Send(Connection& c, std::vector<uint8_t> m) {
    std::shared_ptr<transfer::MessageAuth> auth;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auth = auth_;
    }
    return auth ? auth->SealAndSend(c, std::move(m)) : c.Send(std::move(m));
  }
  static bool IsHello(const std::vector<uint8_t>& m) {
    return PeekType(m).ok() && *PeekType(m) == MessageType::kHello;
  }
  transfer::HandoffReceiver& receiver() { return receiver_; }
  PagePool& pool() { return pool_; }

 private:
  const AttentionOptions attention_;
  transfer::Region region_;
  PagePool pool_;
  transfer::HandoffReceiver receiver_;
  const uint64_t instance_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<uint8_t>> inbox_;
  bool closed_ = false;
  std::shared_ptr<transfer::MessageAuth> auth_;  // guarded by mu_
};

// On the tiny llama model and on dsa-tiny (deepseek32: kv_latent + index_k).
class PrefillEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = MakePresetModel(GetParam(), TensorType::kF32);
    spec_ = std::make_unique<CacheSpec>(*MakeCacheSpec(model_->model->config(), AttentionOptions{}));
    net_ = std::make_shared<transfer::LoopbackNetwork>();
    prefill_transport_ = std::make_unique<transfer::LoopbackTransport>(net_);
    decode_transport_ = std::make_unique<transfer::LoopbackTransport>(net_);
  }
  void StartWorker(PrefillOptions options = {}, int64_t cache_tokens = 64 * kPageTokens) {
    options.engine.chunk_size = 32;
    options.engine.cache_tokens = cache_tokens;
    options.engine.threads = 1;
    auto server = PrefillServer::Create(*model_->model, options, std::move(prefill_transport_));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    worker_ = &server_->engine();
    PrefillServer::Wrap wrap;
    if (faults_) {
      wrap = [plan = *faults_](std::shared_ptr<Connection> c) -> std::shared_ptr<Connection> {
        return std::make_shared<faults::FaultyConnection>(std::move(c), plan);
      };
    }
    ASSERT_TRUE(server_->Listen("prefill", std::move(wrap)).ok());
  }
  // A new decode engine's connection to the worker (nothing sent yet).
  std::shared_ptr<Connection> Wire(std::unique_ptr<FakeDecode>* out) {
    *out = std::make_unique<FakeDecode>(*model_->model, *spec_, *decode_transport_);
    FakeDecode* d = out->get();
    ConnectionHandlers h;
    h.on_message = [d](Connection&, std::vector<uint8_t> m) { d->OnMessage(std::move(m)); };
    h.on_close = [d](Connection&, const Status&) { d->OnClose(); };
    auto c = decode_transport_->Connect("prefill", h);
    EXPECT_TRUE(c.ok());
    return c.ok() ? *c : nullptr;
  }
  // A decode engine connected to the worker, its Hello sent.
  std::pair<std::unique_ptr<FakeDecode>, std::shared_ptr<Connection>> Connect(const std::string& weights = "") {
    std::unique_ptr<FakeDecode> decode;
    auto c = Wire(&decode);
    FakeDecode* d = decode.get();
    const std::string w = weights.empty() ? WeightsIdentity(*model_->model) : weights;
    EXPECT_TRUE(c->Send(d->MyHello(w).Encode()).ok());
    EXPECT_TRUE(d->Next(MessageType::kHello).has_value());
    return {std::move(decode), c};
  }
  std::vector<int32_t> Prompt(uint32_t seed) {
    return testing::PseudoRandomTokens(200, model_->model->config().vocab_size, seed);
  }

  std::unique_ptr<testing::InMemoryModel> model_;
  std::unique_ptr<CacheSpec> spec_;
  std::shared_ptr<transfer::LoopbackNetwork> net_;
  std::unique_ptr<transfer::LoopbackTransport> prefill_transport_, decode_transport_;
  std::optional<faults::FaultPlan> faults_;
  std::unique_ptr<PrefillServer> server_;  // last: it stops first, while the decode side lives
  PrefillEngine* worker_ = nullptr;        // server_'s
};

// Regression: handoff ids restart at 1 in every decode process and the
// prefill side matched an Abort by id across all connections, so one decode
// server's Abort stopped another's handoff.
TEST_P(PrefillEngineTest, AnAbortFromAnotherConnectionDoesNotStopThisOnesHandoff) {
  StartWorker();
  auto [a, to_a] = Connect();
  auto [b, to_b] = Connect();
  ASSERT_TRUE(to_a->Send(a->DestinationFor(1, Prompt(1))).ok());
  ASSERT_TRUE(to_b->Send(b->DestinationFor(1, Prompt(2))).ok());
  ASSERT_TRUE(to_b->Send(Abort{1, AbortCode::kCancelled, "client gone"}.Encode()).ok());
  auto commit = a->Next(MessageType::kCommit);
  ASSERT_TRUE(commit.has_value()) << "A's handoff 1 must commit whatever B aborts";
  auto ready = a->receiver().OnCommit(*Commit::Decode(*commit), 1, Clock::now());
  EXPECT_TRUE(ready.ok()) << ready.status().ToString();
  // B's own handoff 1 ends with an acknowledgement (or its commit, if it was already done).
  EXPECT_TRUE(b->Next(MessageType::kAbortAck).has_value());
}

// Regression: the sender ignored a failed or timed-out Flush and the worker
// still sent AbortAck — the decode side then freed pages late puts could land in.
TEST_P(PrefillEngineTest, AnAbortIsNeverAcknowledgedWhenTheFlushCannotBeConfirmed) {
  faults_ = faults::FaultPlan{};
  faults_->flush_never_confirms = true;
  faults_->put_delay = 2ms;
  StartWorker();
  auto [d, conn] = Connect();
  ASSERT_TRUE(conn->Send(d->DestinationFor(5, Prompt(5))).ok());
  // The handoff ends without a confirmed flush. Neither a Commit nor an Abort
  // (both would let the decode side free or use the pages) nor an AbortAck may
  // go out: the worker closes the connection (the fence), long before any timeout.
  const auto t0 = Clock::now();
  EXPECT_TRUE(d->WaitClosed()) << "the worker must close the connection it cannot fence";
  EXPECT_LT(Clock::now() - t0, 3s) << "closed by the failed flush, not by the peer timeout";
  EXPECT_FALSE(d->NextOf({MessageType::kAbortAck, MessageType::kCommit, MessageType::kAbort}, 0s).has_value());
  EXPECT_EQ(worker_->stats().peers_closed, 1);
}

TEST_P(PrefillEngineTest, AFullQueueRefusesWithAReasonAndServesTheRest) {
  PrefillOptions o;
  o.max_queue = 1;
  o.engine.max_running = 1;  // one prompt at a time: the rest queue
  StartWorker(o);
  auto [d, conn] = Connect();
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_TRUE(conn->Send(d->DestinationFor(id, Prompt(uint32_t(id)))).ok());
  int commits = 0, refusals = 0;
  for (int i = 0; i < 6; ++i) {  // each handoff ends in a Commit or an Abort that says why
    auto m = d->NextOf({MessageType::kCommit, MessageType::kAbort});
    ASSERT_TRUE(m.has_value()) << "handoff " << i << " never ended";
    if (*PeekType(*m) == MessageType::kCommit) {
      ++commits;
      continue;
    }
    auto abort = Abort::Decode(*m);
    ASSERT_TRUE(abort.ok());
    EXPECT_EQ(abort->code, AbortCode::kQueueFull) << abort->reason;
    EXPECT_NE(abort->reason.find("queue is full"), std::string::npos) << abort->reason;
    ++refusals;
  }
  EXPECT_GT(refusals, 0);
  EXPECT_GT(commits, 0);
  EXPECT_EQ(worker_->stats().refused, refusals);  // counted before the refusal was sent
  EXPECT_LE(worker_->stats().committed, commits);  // counted just after the commit went out
}

// A queued handoff has a deadline too (its time budget): it is refused with
// the reason, not left to wait behind the running one.
TEST_P(PrefillEngineTest, AQueuedHandoffPastItsBudgetIsRefusedWithTheReason) {
  StartWorker();
  auto [d, conn] = Connect();
  ASSERT_TRUE(conn->Send(d->DestinationFor(1, testing::PseudoRandomTokens(900, model_->model->config().vocab_size, 1))).ok());
  auto late = Destination::Decode(d->DestinationFor(2, Prompt(2)));
  ASSERT_TRUE(late.ok());
  late->time_budget_ms = 1;  // gone by the time the first one is done
  ASSERT_TRUE(conn->Send(late->Encode()).ok());
  bool committed = false, refused = false;
  for (int i = 0; i < 2; ++i) {  // in either order: the first one's Commit, the second one's Abort
    auto m = d->NextOf({MessageType::kCommit, MessageType::kAbort});
    ASSERT_TRUE(m.has_value());
    if (*PeekType(*m) == MessageType::kCommit) {
      committed = Commit::Decode(*m)->handoff_id == 1;
      continue;
    }
    auto a = Abort::Decode(*m);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->handoff_id, 2u);
    EXPECT_EQ(a->code, AbortCode::kDeadline) << a->reason;
    EXPECT_NE(a->reason.find("time budget ran out"), std::string::npos) << a->reason;
    refused = true;
  }
  EXPECT_TRUE(committed) << "the first one still commits";
  EXPECT_TRUE(refused);
}

// Regression (review): a second Destination with an id in flight was refused
// with an Abort, and the decode side freed the pages the first was writing.
TEST_P(PrefillEngineTest, ADuplicateDestinationIsIgnoredAndTheFirstCommitsIntact) {
  StartWorker();
  auto [d, conn] = Connect();
  const auto bytes = d->DestinationFor(3, Prompt(3));
  ASSERT_TRUE(conn->Send(bytes).ok());
  ASSERT_TRUE(conn->Send(bytes).ok());
  auto m = d->NextOf({MessageType::kCommit, MessageType::kAbort});
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(*PeekType(*m), MessageType::kCommit) << "the duplicate must not be answered with an Abort";
  auto ready = d->receiver().OnCommit(*Commit::Decode(*m), 1, Clock::now());
  EXPECT_TRUE(ready.ok()) << ready.status().ToString();  // digests verified: the pages are intact
  EXPECT_FALSE(d->NextOf({MessageType::kCommit, MessageType::kAbort}, 300ms).has_value());
}

// Prompts that together need more pages than the prefill pool holds: the
// scheduler preempts (flushing the victim's writes first) and recomputes, and
// every handoff still commits with digests that verify.
TEST_P(PrefillEngineTest, PreemptionMidHandoffStillCommitsVerifiedPages) {
  PrefillOptions o;
  o.engine.max_batch_tokens = 256;
  // 12 pages; prompts of 7 pages each, several steps long: any two running
  // together need more than the pool, so the scheduler must preempt.
  StartWorker(o, 12 * kPageTokens);
  auto [d, conn] = Connect();
  for (uint64_t id = 1; id <= 4; ++id) {
    const auto prompt = testing::PseudoRandomTokens(400, model_->model->config().vocab_size, uint32_t(id));
    ASSERT_TRUE(conn->Send(d->DestinationFor(id, prompt)).ok());
  }
  for (int i = 0; i < 4; ++i) {
    auto m = d->NextOf({MessageType::kCommit, MessageType::kAbort});
    ASSERT_TRUE(m.has_value()) << "handoff " << i << " never ended";
    ASSERT_EQ(*PeekType(*m), MessageType::kCommit) << Abort::Decode(*m)->reason;
    auto ready = d->receiver().OnCommit(*Commit::Decode(*m), 1, Clock::now());
    EXPECT_TRUE(ready.ok()) << ready.status().ToString();
    if (ready.ok()) d->pool().Release(ready->pages);
  }
  // Published after the step that preempted (bounded wait for the count).
  int64_t preemptions = 0;
  for (const auto until = Clock::now() + 5s; preemptions == 0 && Clock::now() < until;) {
    preemptions = worker_->engine().Stats().preemptions;
    if (preemptions == 0) std::this_thread::yield();
  }
  EXPECT_GT(preemptions, 0) << "two of these prompts need more pages than the pool has";
}

TEST_P(PrefillEngineTest, AHelloWithOtherWeightsIsRefusedAndTheConnectionClosed) {
  StartWorker();
  auto [d, conn] = Connect("tiny:some other weights");  // refused: the worker closes the connection
  EXPECT_TRUE(d->WaitClosed());
  EXPECT_EQ(worker_->stats().peers_closed, 1);
  EXPECT_EQ(worker_->stats().committed, 0);
}

// A prefill engine with a cluster key takes destinations only from a decode
// engine that proves it: on its Hello (a missing or wrong proof closes the
// connection) and on every destination (over this connection's nonce, so one
// recorded on another connection, or made without the key, is refused).
TEST_P(PrefillEngineTest, WithAClusterKeyOnlyDecodeEnginesThatProveItAreServed) {
  auto key = transfer::ClusterKey::FromSecret("the cluster's shared secret");
  auto wrong = transfer::ClusterKey::FromSecret("somebody else's secret!!!!");
  ASSERT_TRUE(key.ok() && wrong.ok());
  PrefillOptions o;
  o.cluster_key = *key;
  StartWorker(o);
  const std::string weights = WeightsIdentity(*model_->model);
  // Connects and says Hello with `proof_key`'s proof (none: no proof); returns
  // the prefill engine's Hello, or nullopt when it closed the connection.
  auto hello_with = [&](const transfer::ClusterKey* proof_key, std::unique_ptr<FakeDecode>* out,
                        std::shared_ptr<Connection>* conn, std::vector<uint8_t>* nonce) -> std::optional<Hello> {
    *conn = Wire(out);
    FakeDecode* d = out->get();
    Hello hello = d->MyHello(weights);
    *nonce = transfer::NewNonce();
    if (proof_key) {
      hello.nonce = *nonce;
      hello.proof = proof_key->Prove("decode hello", {transfer::HelloSigned(hello)});
    }
    EXPECT_TRUE((*conn)->Send(hello.Encode()).ok());
    auto m = d->Next(MessageType::kHello);
    if (!m) return std::nullopt;
    auto answer = Hello::Decode(*m);
    EXPECT_TRUE(answer.ok());
    if (d->WaitClosed(200ms)) return std::nullopt;
    return *answer;
  };
  std::unique_ptr<FakeDecode> d;
  std::shared_ptr<Connection> conn;
  std::vector<uint8_t> nonce;
  EXPECT_FALSE(hello_with(nullptr, &d, &conn, &nonce).has_value()) << "no proof: refused at connect";
  EXPECT_FALSE(hello_with(&*wrong, &d, &conn, &nonce).has_value()) << "another key: refused at connect";
  EXPECT_EQ(worker_->stats().peers_closed, 2);

  auto answer = hello_with(&*key, &d, &conn, &nonce);
  ASSERT_TRUE(answer.has_value()) << "the right key is accepted";
  d->StartSession(*key, nonce, answer->nonce);
  EXPECT_TRUE(key->Verify("prefill hello", {nonce, answer->nonce}, answer->proof)) << "and the prefill engine proves it back";
  auto auth_under = [&](const transfer::ClusterKey& k, std::vector<uint8_t> over) {
    return [&k, over](const Destination& dest) { return k.Prove("destination", {over, dest.Encode()}); };
  };
  // Unauthenticated, under another key, or over another connection's nonce: refused, each said.
  ASSERT_TRUE(d->Send(*conn, d->DestinationFor(1, Prompt(1))).ok());
  ASSERT_TRUE(d->Send(*conn, d->DestinationFor(2, Prompt(2), auth_under(*wrong, answer->nonce))).ok());
  ASSERT_TRUE(d->Send(*conn, d->DestinationFor(3, Prompt(3), auth_under(*key, nonce))).ok());
  for (int i = 0; i < 3; ++i) {
    auto m = d->NextOf({MessageType::kCommit, MessageType::kAbort});
    ASSERT_TRUE(m.has_value());
    ASSERT_EQ(*PeekType(*m), MessageType::kAbort) << "destination " << i + 1 << " was served";
    auto abort = Abort::Decode(*m);
    ASSERT_TRUE(abort.ok());
    EXPECT_EQ(abort->code, AbortCode::kRefused) << abort->reason;
    EXPECT_NE(abort->reason.find("not authenticated by the cluster key"), std::string::npos) << abort->reason;
  }
  // Proven over this connection's nonce: served.
  ASSERT_TRUE(d->Send(*conn, d->DestinationFor(4, Prompt(4), auth_under(*key, answer->nonce))).ok());
  auto m = d->NextOf({MessageType::kCommit, MessageType::kAbort});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*PeekType(*m), MessageType::kCommit);
  EXPECT_EQ(worker_->stats().refused, 3);
  // The same Hello sent again on another connection (a replay) is refused.
  std::unique_ptr<FakeDecode> r;
  auto replay = Wire(&r);
  ASSERT_TRUE(replay);
  Hello again = d->MyHello(weights);
  again.nonce = nonce;
  again.proof = key->Prove("decode hello", {transfer::HelloSigned(again)});
  ASSERT_TRUE(replay->Send(again.Encode()).ok());
  EXPECT_TRUE(r->WaitClosed()) << "a replayed Hello is refused";
  EXPECT_FALSE(d->WaitClosed(100ms)) << "and the engine's live connection is not dropped as stale";
  // After the Hellos every message is sealed: a Destination (or AbortAck,
  // Abort...) that is not, though authenticated by its own MAC, closes the connection.
  ASSERT_TRUE(conn->Send(d->DestinationFor(5, Prompt(5), auth_under(*key, answer->nonce))).ok());
  EXPECT_TRUE(d->WaitClosed()) << "an unsealed message after the Hellos is refused";
  EXPECT_EQ(worker_->stats().committed, 1);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefillEngineTest, testing::kTestModels, testing::ModelInstanceName);

}  // namespace
}  // namespace tandem
