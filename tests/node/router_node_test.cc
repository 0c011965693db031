// node::RouterNode: a router process assembled from options, started in
// process in front of a colocated server; Stop drains, then stops.
#include "node/router_node.h"

#include <gtest/gtest.h>

#include "runtime/engine.h"
#include "server/http_server.h"
#include "support/http_client.h"
#include "support/test_models.h"

namespace tandem::node {
namespace {

TEST(RouterNode, StartedFromOptionsItRoutesToItsBackendAndStopEndsIt) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  EngineOptions eo;
  eo.cache_tokens = 64 * 100;
  eo.threads = 1;
  auto engine = Engine::Create(*model->model, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ServerOptions so;
  so.port = 0;
  so.model_id = "tiny";
  HttpServer server(**engine, *model->model, so);
  ASSERT_TRUE(server.Start().ok());

  RouterNodeOptions o;
  o.router.port = 0;
  o.router.health_interval = std::chrono::milliseconds(20);
  o.router.backends = {"127.0.0.1:" + std::to_string(server.port())};
  auto node = RouterNode::Start(o, Membership(transfer::ClusterKey{}, false, "test"));
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_FALSE((*node)->by_kv_events());  // no discovery, no model: by conversation and load
  const int port = (*node)->port();
  ASSERT_GT(port, 0);
  const auto answer = testing::HttpPost(port, "/v1/completions",
                                        R"({"model":"tiny","prompt":"Hello","max_tokens":4,"temperature":0})");
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_NE(answer.body.find("\"completion_tokens\":4"), std::string::npos) << answer.body;

  (*node)->Stop(std::chrono::milliseconds(1000));
  EXPECT_NE(testing::HttpGet(port, "/health").status, 200) << "the router still answers after Stop";
  node->reset();
  server.Stop();
}

}  // namespace
}  // namespace tandem::node
