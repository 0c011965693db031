// node::DecodeNode: `tandem serve` assembled from options, started in process
// — as a decode server of an in-process prefill node over loopback, and
// colocated — on a fake clock: its drain deadline is kept by the node's Env.
#include "node/decode_node.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>

#include "node/prefill_node.h"
#include "support/fake_env.h"
#include "support/http_client.h"
#include "support/test_models.h"
#include "support/wait.h"
#include "transfer/loopback.h"

namespace tandem::node {
namespace {

using namespace std::chrono_literals;

Membership Keyless() { return Membership(transfer::ClusterKey{}, true, "test"); }

using MakeTransport = std::function<StatusOr<std::unique_ptr<transfer::Transport>>()>;

// Transports on one in-process network.
MakeTransport Loopback() {
  auto net = std::make_shared<transfer::LoopbackNetwork>();
  return [net]() -> StatusOr<std::unique_ptr<transfer::Transport>> {
    return std::unique_ptr<transfer::Transport>(new transfer::LoopbackTransport(net));
  };
}

// A prefill node at "prefill:0" on `env`'s clock.
PrefillNodeOptions PrefillOn(testing::FakeEnv& env, const MakeTransport& transport) {
  PrefillNodeOptions p;
  p.prefill.env = &env;
  p.prefill.engine.cache_tokens = 64 * kPageTokens;
  p.prefill.engine.threads = 1;
  p.prefill.heartbeat_interval = 20ms;
  p.host = "prefill";
  p.make_transport = transport;
  return p;
}

// A decode server of that prefill node, every prompt computed there.
DecodeNodeOptions DecodeServerOn(testing::FakeEnv& env, const MakeTransport& transport) {
  DecodeNodeOptions o;
  o.engine.env = &env;
  o.engine.threads = 1;
  o.engine.cache_tokens = 64 * kPageTokens;
  o.server.port = 0;
  o.server.model_id = "tiny";
  o.decode.emplace();
  o.decode->prefill_addresses = "prefill:0";
  o.decode->local_prefill = false;
  o.decode->make_transport = transport;
  return o;
}

TEST(DecodeNode, AsADecodeServerItAnswersOverHttpWithPromptsComputedByItsPrefillNode) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  testing::FakeEnv env;  // every deadline and liveness check on one clock that stands still
  const auto loopback = Loopback();
  const PrefillNodeOptions p = PrefillOn(env, loopback);
  auto prefill = PrefillNode::Start(*model->model, p, Keyless());
  ASSERT_TRUE(prefill.ok()) << prefill.status().ToString();

  DecodeNodeOptions o = DecodeServerOn(env, loopback);
  auto node = DecodeNode::Start(*model->model, o, Keyless());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_TRUE((*node)->decode_server());
  const int port = (*node)->port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(testing::WaitUntil([&] { return (*node)->engine().Healthy(); }, 10s))
      << "the decode server's link to its prefill node never came up: " << (*node)->engine().HealthNote();

  const auto answer = testing::HttpPost(port, "/v1/completions",
                                        R"({"model":"tiny","prompt":"Hello there","max_tokens":4,"temperature":0})");
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_NE(answer.body.find("\"completion_tokens\":4"), std::string::npos) << answer.body;
  EXPECT_EQ((*prefill)->engine().stats().committed, 1) << "the prompt was not handed off by the prefill node";

  (*node)->Stop();
  EXPECT_NE(testing::HttpGet(port, "/health").status, 200) << "the server still answers after Stop";
  node->reset();  // the decode side first: its links point at the prefill node's transport
  prefill->reset();
}

// A prefill node that goes away is declared dead when the peer timeout
// passes on the decode node's clock (not before), and one started again at
// the same address is linked and used once the reconnect backoff has passed
// on that clock.
TEST(DecodeNode, APrefillNodeStartedAgainIsLinkedAfterTheBackoffOnTheNodesClock) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  testing::FakeEnv env;
  const auto loopback = Loopback();
  const PrefillNodeOptions p = PrefillOn(env, loopback);
  auto first = PrefillNode::Start(*model->model, p, Keyless());
  ASSERT_TRUE(first.ok()) << first.status().ToString();

  DecodeNodeOptions o = DecodeServerOn(env, loopback);
  auto node = DecodeNode::Start(*model->model, o, Keyless());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  Engine& engine = (*node)->engine();
  ASSERT_TRUE(testing::WaitUntil([&] { return engine.Healthy(); }, 10s)) << engine.HealthNote();

  (*first)->Stop();
  first->reset();
  // Fake time stands still: silence has lasted no time at all, so the link
  // stays up however long this takes in real time.
  EXPECT_TRUE(engine.Healthy()) << engine.HealthNote();
  env.Advance(o.decode->peer_timeout + 1ms);
  ASSERT_TRUE(testing::WaitUntil([&] { return !engine.Healthy(); }, 10s))
      << "the gone prefill node was not declared dead past the peer timeout";

  auto second = PrefillNode::Start(*model->model, p, Keyless());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  // The reconnect waits for its backoff on the node's clock: moved on by the
  // poll (the new node's heartbeats keep the link live meanwhile).
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        env.Advance(50ms);
        return engine.Healthy();
      },
      20s))
      << "the restarted prefill node was never linked again: " << engine.HealthNote();
  const auto answer = testing::HttpPost((*node)->port(), "/v1/completions",
                                        R"({"model":"tiny","prompt":"Hello again","max_tokens":3,"temperature":0})");
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ((*second)->engine().stats().committed, 1) << "the prompt did not go to the restarted prefill node";
  node->reset();
  second->reset();
}

TEST(DecodeNode, StopDrainsInFlightRequestsUntilTheShutdownTimeoutPassesOnTheNodesClock) {
  auto model = testing::MakePresetModel("micro", TensorType::kF32);  // long context, cheap tokens
  testing::FakeEnv env;
  DecodeNodeOptions o;
  o.engine.env = &env;
  o.engine.threads = 1;
  o.engine.cache_tokens = 65536;
  o.server.port = 0;
  o.shutdown_timeout = 1ms;  // on the real clock the drain would end at once
  auto node = DecodeNode::Start(*model->model, o, Keyless());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_FALSE((*node)->decode_server());

  RequestSpec spec;
  spec.prompt = testing::PseudoRandomTokens(16, model->model->config().vocab_size, 5);
  spec.max_tokens = 60000;
  spec.ignore_eos = true;
  auto h = (*node)->engine().Submit(std::move(spec));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  StreamEvent ev;
  int64_t tokens = 0;
  auto read = [&](int64_t more) {  // until `more` further tokens came, or the stream ended
    const int64_t until = tokens + more;
    while (tokens < until && (*h)->Next(&ev, 30s) && ev.kind == StreamEvent::Kind::kText) {
      tokens += int64_t(ev.tokens.size());
    }
    return tokens >= until;
  };
  ASSERT_TRUE(read(8)) << "the request did not start: " << ev.error.ToString();

  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    (*node)->Stop();
    stopped = true;
  });
  // The drain has begun (Stop is under way) and fake time stands still: the
  // request keeps decoding, and Stop cannot return while it does. (Checked
  // first, asserted after the clock moved and Stop returned.)
  const bool draining = testing::WaitUntil([&] { return (*node)->engine().draining(); }, 10s);
  const bool kept_decoding = draining && read(64);
  const bool stopped_early = stopped.load();
  env.Advance(2ms);  // past the shutdown timeout
  while (ev.kind == StreamEvent::Kind::kText && (*h)->Next(&ev, 30s)) {
  }
  stopper.join();
  ASSERT_TRUE(draining) << "Stop never began draining";
  ASSERT_TRUE(kept_decoding) << "the drain ended the request before its deadline passed on the node's clock: "
                             << ev.error.ToString();
  EXPECT_FALSE(stopped_early) << "Stop returned with a request still decoding inside the drain";
  EXPECT_TRUE(stopped.load());
  ASSERT_NE(ev.kind, StreamEvent::Kind::kText) << "the request never ended";
  EXPECT_NE(ev.finish, FinishReason::kLength) << "the request ran to its end instead of being cut by the drain";
  EXPECT_LT(tokens, 60000);
}

}  // namespace
}  // namespace tandem::node
