// The decode role in-process: a decode engine (runtime/engine.h with
// decode/decode_role.h) linked to a real prefill server (prefill/prefill_server.h)
// over the loopback transport, faults from the fault library, and a fake clock
// for every deadline the role keeps — liveness, reconnect backoff, probation,
// the handoff deadline and the page wait. Time moves only when a test moves
// it, so each deadline is checked to the millisecond and nothing sleeps.
//
// Heartbeats still travel on real time (their threads send every 20 ms):
// a test that moves the clock across more than one peer timeout does it in
// steps, waiting after each until the role has heard a message at the new
// time (the link's tandem_prefill_link_messages_total), as a live peer would
// be heard. The fake durations are long (seconds), so the real time the
// steps take (tens of milliseconds each) never reaches the prefill engine's
// own real-time budgets.
#include "decode/decode_role.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "faults/faulty_connection.h"
#include "prefill/prefill_server.h"
#include "runtime/engine.h"
#include "support/fake_env.h"
#include "support/http_client.h"
#include "support/test_models.h"
#include "support/wait.h"
#include "transfer/loopback.h"

namespace tandem::decode {
namespace {

using namespace std::chrono_literals;
using testing::FakeEnv;
using testing::WaitUntil;
using transfer::Connection;

constexpr auto kPeerTimeout = 10'000ms;
constexpr auto kBackoff = 100ms;

class DecodeRoleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::MakePresetModel("tiny", TensorType::kF32);
    net_ = std::make_shared<transfer::LoopbackNetwork>();
  }
  void TearDown() override {
    engine_.reset();  // the decode side first: its links point at the server
    server_.reset();
  }

  // A prefill server at "prefill"; the first `faulty` connections it accepts
  // get `plan` (the fault library's faulty connection), later ones none.
  void StartPrefill(faults::FaultPlan plan = {}, int faulty = 0) {
    PrefillOptions po;
    po.engine.chunk_size = 64;
    po.engine.cache_tokens = 64 * kPageTokens;
    po.engine.threads = 1;
    po.peer_timeout = std::chrono::minutes(10);  // the decode side's clock is the one under test
    po.heartbeat_interval = 20ms;                // real time: a live peer is heard often
    auto server = PrefillServer::Create(*model_->model, po, std::make_unique<transfer::LoopbackTransport>(net_));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_TRUE(server_
                    ->Listen("prefill",
                             [this, plan, faulty](std::shared_ptr<Connection> c) -> std::shared_ptr<Connection> {
                               std::lock_guard<std::mutex> lock(mu_);
                               if (accepted_++ >= faulty) return c;
                               return std::make_shared<faults::FaultyConnection>(std::move(c), plan);
                             })
                    .ok());
  }

  // The decode engine, its links on the loopback transport and the fake clock.
  void StartDecode(DecodeOptions options = {}, int64_t cache_tokens = 64 * kPageTokens,
                   std::vector<std::string> addresses = {"prefill"}) {
    EngineOptions eo;
    eo.threads = 1;
    eo.cache_tokens = cache_tokens;
    options.peer_timeout = kPeerTimeout;
    auto links = DecodeRole::LinksOptions(*model_->model, eo, options);
    ASSERT_TRUE(links.ok()) << links.status().ToString();
    links->addresses = std::move(addresses);
    links->make_transport = [net = net_]() -> StatusOr<std::unique_ptr<transfer::Transport>> {
      return std::unique_ptr<transfer::Transport>(new transfer::LoopbackTransport(net));
    };
    links->env = &clock_;
    links->reconnect_min = kBackoff;
    links->reconnect_max = 4 * kBackoff;
    links->heartbeat_interval = 20ms;
    auto role = DecodeRole::Start(options, std::move(links).value());
    ASSERT_TRUE(role.ok()) << role.status().ToString();
    role_ = role->get();
    auto engine = Engine::Create(*model_->model, eo, std::move(role).value());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }

  double Metric(const std::string& name) { return testing::ParseMetrics(engine_->metrics().Text())[name]; }
  // A prefill engine link is up: healthy and not degraded (with local
  // prefill, an engine without links still serves, and says why).
  bool Healthy() { return engine_->Healthy() && engine_->HealthNote().empty(); }
  // Moves the clock by `d`, then waits until the decode side has heard from
  // its prefill engine at the new time (a live peer's heartbeat). The count
  // moves once per poll of the links: the first move after the advance may
  // come from a poll that began before it, the second cannot.
  void AdvanceHeard(std::chrono::milliseconds d) {
    clock_.Advance(d);
    for (int poll = 0; poll < 2; ++poll) {
      const double seen = Metric("tandem_prefill_link_messages_total");
      ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_prefill_link_messages_total") > seen; }, 5s, 1ms))
          << "no message from the prefill engine";
    }
  }
  std::shared_ptr<RequestHandle> Submit(uint32_t seed, size_t prompt_tokens = 100) {
    RequestSpec spec;
    spec.prompt = testing::PseudoRandomTokens(prompt_tokens, model_->model->config().vocab_size, seed);
    spec.max_tokens = 4;
    auto h = engine_->Submit(std::move(spec));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? *h : nullptr;
  }
  // The request's end: its error, or OK when it finished.
  Status EndOf(RequestHandle& h) {
    StreamEvent ev;
    while (h.Next(&ev, 10s)) {
      if (ev.kind == StreamEvent::Kind::kError) return ev.error;
      if (ev.kind == StreamEvent::Kind::kFinish) return Status::Ok();
    }
    return Status(StatusCode::kDeadlineExceeded, "no end within 10 s");
  }

  std::unique_ptr<testing::InMemoryModel> model_;
  std::shared_ptr<transfer::LoopbackNetwork> net_;
  FakeEnv clock_;
  std::mutex mu_;
  int accepted_ = 0;  // guarded by mu_
  std::unique_ptr<PrefillServer> server_;
  std::unique_ptr<Engine> engine_;
  DecodeRole* role_ = nullptr;  // engine_'s
};

// A prefill engine that answers the handshake and then says nothing (a wedge):
// alive until the peer timeout has passed on the decode side's clock, declared
// dead the moment it has.
TEST_F(DecodeRoleTest, ASilentPrefillEngineIsDeclaredDeadWhenThePeerTimeoutPassesOnItsClock) {
  faults::FaultPlan wedge;
  wedge.drop_messages_after = 1;  // its Hello, then silence
  StartPrefill(wedge, /*faulty=*/1000);
  StartDecode();
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "the link is up after the handshake";
  clock_.Advance(kPeerTimeout);  // silent for exactly the timeout: not past it
  EXPECT_FALSE(WaitUntil([&] { return Metric("tandem_prefill_links_declared_dead_total") > 0; }, 300ms, 5ms))
      << "declared dead before its peer timeout had passed";
  EXPECT_TRUE(Healthy());
  clock_.Advance(1ms);
  EXPECT_TRUE(WaitUntil([&] { return Metric("tandem_prefill_links_declared_dead_total") == 1; }, 5s, 1ms));
  EXPECT_TRUE(WaitUntil([&] { return !Healthy(); }, 5s, 1ms)) << "no link up: the engine is not healthy";
  EXPECT_EQ(Metric("tandem_prefill_links_up"), 0);
}

// No prefill engine link up: the decode server computes prompts itself (the
// same engine, so the same tokens as colocated), stays healthy and says it
// is degraded, and counts them; --no-local-prefill refuses them instead.
// Requests that need logits here (logprobs) run here even with a link up.
TEST_F(DecodeRoleTest, WithNoPrefillEngineUpPromptsAreComputedHereAndHealthSaysSo) {
  faults::FaultPlan wedge;
  wedge.drop_messages_after = 1;
  StartPrefill(wedge, /*faulty=*/1000);
  StartDecode();
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "the link comes up (an asynchronous handshake)";
  RequestSpec logprobs;
  logprobs.prompt = testing::PseudoRandomTokens(40, model_->model->config().vocab_size, 9);
  logprobs.max_tokens = 3;
  logprobs.logprobs = 2;
  auto lp = engine_->Submit(logprobs);
  ASSERT_TRUE(lp.ok()) << lp.status().ToString();
  EXPECT_TRUE(EndOf(**lp).ok());
  EXPECT_EQ(Metric("tandem_local_prefills_total{reason=\"logits_here\"}"), 1);
  EXPECT_EQ(Metric("tandem_handoffs_total{outcome=\"committed\"}"), 0);
  clock_.Advance(kPeerTimeout + 1ms);
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_prefill_links_up") == 0; }, 5s, 1ms));
  EXPECT_TRUE(engine_->Healthy()) << "it serves without a link";
  EXPECT_NE(engine_->HealthNote().find("no prefill engine link is up"), std::string::npos) << engine_->HealthNote();
  auto h = Submit(3);
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(EndOf(*h).ok());
  EXPECT_EQ(Metric("tandem_local_prefills_total{reason=\"no_prefill_engine\"}"), 1);
}

TEST_F(DecodeRoleTest, WithoutLocalPrefillNoPrefillEngineMeansUnavailable) {
  faults::FaultPlan wedge;
  wedge.drop_messages_after = 1;
  StartPrefill(wedge, /*faulty=*/1000);
  DecodeOptions d;
  d.local_prefill = false;
  StartDecode(d);
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "the link comes up (an asynchronous handshake)";
  clock_.Advance(kPeerTimeout + 1ms);
  ASSERT_TRUE(WaitUntil([&] { return !engine_->Healthy(); }, 5s, 1ms));
  EXPECT_NE(engine_->HealthNote().find("--no-local-prefill"), std::string::npos) << engine_->HealthNote();
  auto h = Submit(4);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(EndOf(*h).code(), StatusCode::kUnavailable);
}

// After it is declared dead, the link reconnects when its backoff has passed
// (not before); the same engine instance, declared dead for silence, is on
// probation: out of service until it has stayed live for two peer timeouts.
TEST_F(DecodeRoleTest, AWedgedEngineReconnectsAfterItsBackoffAndServesOnlyAfterProbation) {
  faults::FaultPlan wedge;
  wedge.drop_messages_after = 1;
  StartPrefill(wedge, /*faulty=*/1);  // only the first connection is wedged
  StartDecode();
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "the link comes up (an asynchronous handshake)";
  clock_.Advance(kPeerTimeout + 1ms);
  ASSERT_TRUE(WaitUntil([&] { return !Healthy(); }, 5s, 1ms));
  // The backoff is on the same clock.
  EXPECT_FALSE(WaitUntil([&] { return Metric("tandem_prefill_link_reconnects_total") > 0; }, 300ms, 5ms))
      << "reconnected before its backoff";
  clock_.Advance(kBackoff);
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_prefill_link_reconnects_total") == 1; }, 5s, 1ms));
  // The new connection's handshake is accepted; probation holds it out of
  // service while it stays live, heartbeat after heartbeat.
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_prefill_link_messages_total") > 1; }, 5s, 1ms));
  const auto step = kPeerTimeout / 4;
  for (auto on_probation = 0ms; on_probation + step < 2 * kPeerTimeout; on_probation += step) {
    AdvanceHeard(step);
    EXPECT_FALSE(Healthy()) << "in service after " << (on_probation + step).count() << " ms of probation";
  }
  AdvanceHeard(step);  // two peer timeouts live
  EXPECT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "probation over: back in service";
  EXPECT_EQ(Metric("tandem_prefill_links_declared_dead_total"), 1) << "live throughout probation";
  // And it serves: a request is handed off and finishes.
  auto h = Submit(1);
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(EndOf(*h).ok());
}

// A prefill engine that is live (heartbeats) but never commits — its page
// writes are delayed past the handoff's deadline: the decode side aborts the
// handoff at its deadline on its clock, and with one placement allowed the
// request ends with the reason. Its pages stay quarantined until the peer
// acknowledges the abort (the fence): never freed on a timer alone.
TEST_F(DecodeRoleTest, AHandoffPastItsDeadlineIsAbortedAndItsRequestEndsWithTheReason) {
  faults::FaultPlan slow;
  slow.put_delay = 600s;  // real time: never, while the test runs
  StartPrefill(slow, /*faulty=*/1000);
  DecodeOptions d;
  d.handoff_timeout = 20'000ms;  // also the prefill engine's budget for it, in real time: far off
  d.max_placements = 1;
  StartDecode(d);
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "the link comes up (an asynchronous handshake)";
  auto h = Submit(2);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_handoffs_in_flight") == 1; }, 5s, 1ms));
  const auto step = kPeerTimeout / 4;
  for (auto waited = 0ms; waited + step < d.handoff_timeout; waited += step) {
    AdvanceHeard(step);
    EXPECT_FALSE(h->finished()) << "ended before its deadline, at " << (waited + step).count() << " ms";
  }
  AdvanceHeard(step + 1ms);  // past the deadline
  const Status end = EndOf(*h);
  EXPECT_EQ(end.code(), StatusCode::kDeadlineExceeded) << end.ToString();
  EXPECT_NE(end.message().find("did not commit before its deadline"), std::string::npos) << end.ToString();
  EXPECT_TRUE(WaitUntil([&] { return Metric("tandem_handoffs_total{outcome=\"aborted\"}") == 1; }, 5s, 1ms));
  EXPECT_EQ(Metric("tandem_handoff_replacements_total"), 0) << "one placement allowed";
  EXPECT_TRUE(Healthy()) << "the link is live: only the handoff ended";
}

// The fence: the pages of an aborted handoff stay quarantined while its
// peer may still write them — its acknowledgement never comes (its writes
// are stuck) — and are freed when the link is closed for the missing
// acknowledgement, eight peer timeouts after the abort on the role's clock,
// the close being what stops the peer's writes. Never on a shorter timer.
TEST_F(DecodeRoleTest, AnAbortedHandoffsPagesStayQuarantinedUntilItsLinkIsClosedForTheMissingAck) {
  faults::FaultPlan slow;
  slow.put_delay = 600s;  // real time: no flush, so no acknowledgement, while the test runs
  StartPrefill(slow, /*faulty=*/1);
  DecodeOptions d;
  // Also the prefill engine's time budget for it, in real time: it would give
  // up (and close the connection, the other fence) only long after the test.
  d.handoff_timeout = 20'000ms;
  d.max_placements = 1;
  StartDecode(d);
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "the link comes up (an asynchronous handshake)";
  auto h = Submit(5);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_handoffs_in_flight") == 1; }, 5s, 1ms));
  const auto step = kPeerTimeout / 4;
  // The abort comes at the step that reaches the deadline.
  for (auto waited = 0ms; waited < d.handoff_timeout; waited += step) AdvanceHeard(step);
  EXPECT_EQ(EndOf(*h).code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_handoff_quarantined_pages") > 0; }, 5s, 1ms))
      << "aborted, not acknowledged: quarantined";
  // Held through 8 peer timeouts after the abort, released only past them.
  for (auto since = step; since <= 8 * kPeerTimeout; since += step) {
    AdvanceHeard(step);
    ASSERT_GT(Metric("tandem_handoff_quarantined_pages"), 0) << "released " << since.count() << " ms after the abort";
  }
  clock_.Advance(1ms);
  EXPECT_TRUE(WaitUntil([&] { return Metric("tandem_handoff_quarantined_pages") == 0; }, 5s, 1ms))
      << "the link closed for the missing acknowledgement: the close is the fence, the pages are free";
  EXPECT_EQ(Metric("tandem_handoffs_in_flight"), 0);
  // The engine is back in service on a new connection (not wedged: no probation).
  clock_.Advance(kBackoff);
  EXPECT_TRUE(WaitUntil([&] { return Metric("tandem_prefill_link_reconnects_total") == 1 && Healthy(); }, 5s, 1ms));
}

// A request whose handoff cannot reserve pages waits for them (its handoff
// not begun) until the page wait passes on the role's clock, then fails
// naming the wait; meanwhile the request holding the pages is untouched.
TEST_F(DecodeRoleTest, ARequestWaitingForPagesPastThePageWaitFailsNamingTheWait) {
  faults::FaultPlan slow;
  slow.put_delay = 600s;  // the first handoff holds its pages until after the test's checks
  StartPrefill(slow, /*faulty=*/1000);
  DecodeOptions d;
  d.page_wait = 15'000ms;
  d.handoff_timeout = 600s;
  StartDecode(d, /*cache_tokens=*/4 * kPageTokens);
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << "the link comes up (an asynchronous handshake)";
  auto first = Submit(3, 150);  // 3 of the 4 pages
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_handoffs_in_flight") == 1; }, 5s, 1ms));
  auto second = Submit(4, 150);  // no room until the first ends
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return engine_->Stats().waiting == 1; }, 5s, 1ms));
  const auto step = kPeerTimeout / 4;
  for (auto waited = 0ms; waited + step < d.page_wait; waited += step) {
    AdvanceHeard(step);
    EXPECT_FALSE(second->finished()) << "gave up waiting for pages at " << (waited + step).count() << " ms";
  }
  AdvanceHeard(step);
  const Status end = EndOf(*second);
  EXPECT_EQ(end.code(), StatusCode::kResourceExhausted) << end.ToString();
  EXPECT_NE(end.message().find("no cache pages came free for this prompt within 15000 ms"), std::string::npos)
      << end.ToString();
  EXPECT_FALSE(first->finished()) << "the request holding the pages goes on";
  EXPECT_EQ(Metric("tandem_handoffs_in_flight"), 1);
}


// Discovery's view of the prefill engines changes under a running decode
// server: an engine named later is linked and takes handoffs; one no longer
// named takes none and its link closes (prompts are then computed here);
// named again, it is linked again.
TEST_F(DecodeRoleTest, PrefillEnginesNamedByDiscoveryAreLinkedAndUnlinkedWhileServing) {
  StartPrefill();
  DecodeOptions options;
  options.discovered = true;
  StartDecode(options, 64 * kPageTokens, /*addresses=*/{});
  EXPECT_FALSE(Healthy()) << "no prefill engine is named yet";
  role_->SetPrefillAddresses({"prefill"});
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << engine_->HealthNote();
  auto first = Submit(1);
  ASSERT_TRUE(first);
  EXPECT_TRUE(EndOf(*first).ok());
  EXPECT_EQ(Metric("tandem_handoffs_total{outcome=\"committed\"}"), 1);
  role_->SetPrefillAddresses({});
  ASSERT_TRUE(WaitUntil([&] { return Metric("tandem_prefill_links_up") == 0; }, 5s, 1ms));
  EXPECT_FALSE(Healthy());
  auto local = Submit(2);
  ASSERT_TRUE(local);
  EXPECT_TRUE(EndOf(*local).ok());
  EXPECT_EQ(Metric("tandem_handoffs_total{outcome=\"committed\"}"), 1) << "an unlisted engine took a handoff";
  role_->SetPrefillAddresses({"prefill"});
  ASSERT_TRUE(WaitUntil([&] { return Healthy(); }, 5s, 1ms)) << engine_->HealthNote();
  auto again = Submit(3);
  ASSERT_TRUE(again);
  EXPECT_TRUE(EndOf(*again).ok());
  EXPECT_EQ(Metric("tandem_handoffs_total{outcome=\"committed\"}"), 2);
}

}  // namespace
}  // namespace tandem::decode
