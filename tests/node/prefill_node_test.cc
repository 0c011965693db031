// node::PrefillNode: a prefill engine process assembled from options, started
// in process on the loopback transport with a decode engine linked to it.
#include "node/prefill_node.h"

#include <gtest/gtest.h>

#include "decode/decode_role.h"
#include "runtime/engine.h"
#include "support/fake_env.h"
#include "support/test_models.h"
#include "support/wait.h"
#include "transfer/loopback.h"

namespace tandem::node {
namespace {

using namespace std::chrono_literals;

TEST(PrefillNode, StartedFromOptionsItServesADecodeEngineAndStopClosesItsLinks) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  auto net = std::make_shared<transfer::LoopbackNetwork>();
  PrefillNodeOptions o;
  o.prefill.engine.chunk_size = 64;
  o.prefill.engine.cache_tokens = 64 * kPageTokens;
  o.prefill.engine.threads = 1;
  o.prefill.heartbeat_interval = 20ms;
  o.host = "prefill";  // a loopback name: the port is not part of it
  o.make_transport = [net]() -> StatusOr<std::unique_ptr<transfer::Transport>> {
    return std::unique_ptr<transfer::Transport>(new transfer::LoopbackTransport(net));
  };
  o.transport_kind = transfer::TransportKind::kTcp;
  auto node = PrefillNode::Start(*model->model, o, Membership(transfer::ClusterKey{}, true, "test"));
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_STREQ((*node)->transport_family(), "tcp");

  testing::FakeEnv env;  // the decode side's: its peer timeout passes when the test says
  EngineOptions eo;
  eo.env = &env;
  eo.threads = 1;
  eo.cache_tokens = 64 * kPageTokens;
  decode::DecodeOptions d;
  d.local_prefill = false;  // every prompt goes to the node
  auto links = decode::DecodeRole::LinksOptions(*model->model, eo, d);
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  links->addresses = {"prefill:0"};
  links->make_transport = [net]() -> StatusOr<std::unique_ptr<transfer::Transport>> {
    return std::unique_ptr<transfer::Transport>(new transfer::LoopbackTransport(net));
  };
  links->heartbeat_interval = 20ms;
  auto role = decode::DecodeRole::Start(d, std::move(links).value());
  ASSERT_TRUE(role.ok()) << role.status().ToString();
  auto engine = Engine::Create(*model->model, eo, std::move(role).value());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();

  RequestSpec spec;
  spec.prompt = testing::PseudoRandomTokens(100, model->model->config().vocab_size, 3);
  spec.max_tokens = 4;
  auto h = (*engine)->Submit(std::move(spec));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  StreamEvent ev;
  int64_t tokens = 0;
  while ((*h)->Next(&ev, 30s) && ev.kind == StreamEvent::Kind::kText) tokens += int64_t(ev.tokens.size());
  ASSERT_EQ(ev.kind, StreamEvent::Kind::kFinish) << ev.error.ToString();
  EXPECT_EQ(tokens, 4);
  EXPECT_EQ((*node)->engine().stats().committed, 1);  // its prompt was computed by the node

  (*node)->Stop();
  env.Advance(d.peer_timeout + 1ms);  // the node is silent from here
  EXPECT_TRUE(testing::WaitUntil([&] { return !(*engine)->HealthNote().empty() || !(*engine)->Healthy(); }, 10s))
      << "the decode engine did not see its prefill engine go";
  engine->reset();  // the decode side first: its links point at the node's transport
  node->reset();
}

}  // namespace
}  // namespace tandem::node
