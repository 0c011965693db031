// The router moves only what a move can fix (invariant 10, issue 41): a
// request that fails by its own content (a 4xx) is answered as it is, a 500
// never runs a request twice on one backend, and a server that is draining
// or unavailable (503) still has its requests moved. Two scripted backends
// (in this process) count what reaches them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <future>
#include <mutex>

#include "router/router.h"
#include "server/http_core.h"
#include "support/http_client.h"
#include "support/wait.h"

namespace tandem {
namespace {

// Answers every POST with `status` (and an OpenAI-shaped error), /health 200;
// counts the POSTs. Status 0: holds every POST unanswered (a stopped
// server). health: how /health answers.
class ScriptedBackend {
 public:
  enum class Health { kOk, kStalled, kNoAnswer };
  explicit ScriptedBackend(int status) : status_(status), core_(HttpLimits{}, AccessPolicy{}) {
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
      core_.Route("POST", path, [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
        ++posts_;
        const int status = status_.load();
        if (status == 0) {
          std::lock_guard<std::mutex> lock(mu_);
          held_.push_back(std::move(reply));
          return;
        }
        if (status == 200) {
          return reply->Send(200, "application/json", R"({"id":"x","object":"text_completion","choices":[]})");
        }
        reply->Send(status, "application/json",
                    R"({"error":{"message":"scripted )" + std::to_string(status) + R"(","type":"x"}})");
      });
    }
    core_.Route("GET", "/health", [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
      switch (health_.load()) {
        case Health::kOk:
          return reply->Send(200, "application/json", R"({"status":"ok"})");
        case Health::kStalled:
          return reply->Send(503, "application/json", R"({"status":"stalled","reason":"scripted"})");
        case Health::kNoAnswer: {
          std::lock_guard<std::mutex> lock(mu_);
          held_.push_back(std::move(reply));
          return;
        }
      }
    }, /*quick=*/true);
    EXPECT_TRUE(core_.Start("127.0.0.1", 0).ok());
  }
  ~ScriptedBackend() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_.clear();
    }
    core_.Stop();
  }
  int port() const { return core_.port(); }
  int posts() const { return posts_.load(); }
  void set_status(int status) { status_ = status; }
  void set_health(Health h) { health_ = h; }

 private:
  std::atomic<int> status_;
  std::atomic<Health> health_{Health::kOk};
  std::mutex mu_;
  std::vector<std::shared_ptr<HttpReply>> held_;
  std::atomic<int> posts_{0};
  HttpCore core_;
};

class RouterMoves : public ::testing::Test {
 protected:
  void Start(int a, int b, std::chrono::milliseconds silence = std::chrono::milliseconds(5000)) {
    backends_.push_back(std::make_unique<ScriptedBackend>(a));
    backends_.push_back(std::make_unique<ScriptedBackend>(b));
    RouterOptions ro;
    ro.port = 0;
    ro.health_interval = std::chrono::milliseconds(20);
    ro.max_moves = 3;
    ro.move_wait = std::chrono::milliseconds(2000);
    ro.silence_timeout = silence;
    for (const auto& p : backends_) ro.backends.push_back("127.0.0.1:" + std::to_string(p->port()));
    router_ = std::make_unique<Router>(ro);
    ASSERT_TRUE(router_->Start().ok());
    for (const auto& b : backends_) {  // both, or a request could find only one
      const std::string healthy = "tandem_router_backend_healthy{backend=\"127.0.0.1:" + std::to_string(b->port()) + "\"}";
      ASSERT_TRUE(testing::WaitUntil([&] { return Metric(healthy) == 1; }, std::chrono::seconds(10)));
    }
  }
  // Each request its own prompt: no conversation affinity decides placement.
  testing::HttpResult Ask() {
    return testing::HttpPost(router_->port(), "/v1/completions",
                             R"({"prompt":"hello )" + std::to_string(++asked_) + R"(","max_tokens":2})");
  }
  double Metric(const std::string& name) {
    return testing::ParseMetrics(testing::HttpGet(router_->port(), "/metrics").body)[name];
  }
  int Posts() const { return backends_[0]->posts() + backends_[1]->posts(); }

  std::vector<std::unique_ptr<ScriptedBackend>> backends_;
  std::unique_ptr<Router> router_;
  std::atomic<int> asked_{0};
};

TEST_F(RouterMoves, ARequestRefusedByItsContentCostsOneBackendOneRun) {
  Start(400, 400);
  const auto r = Ask();
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("scripted 400"), std::string::npos) << "the backend's own answer: " << r.body;
  EXPECT_EQ(Posts(), 1);
  EXPECT_EQ(Metric("tandem_router_moves_total"), 0);
}

// Before: a 500 was run max_moves + 1 times, on the same backend again once
// every healthy one had been tried. Now each backend runs it at most once.
TEST_F(RouterMoves, AFiveHundredRunsARequestAtMostOncePerBackend) {
  Start(500, 500);
  const auto r = Ask();
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("scripted 500"), std::string::npos) << "the last backend's own answer: " << r.body;
  EXPECT_EQ(backends_[0]->posts(), 1);
  EXPECT_EQ(backends_[1]->posts(), 1);
  EXPECT_EQ(Metric("tandem_router_moves_by_reason_total{reason=\"server_error\"}"), 1);
  EXPECT_EQ(Metric("tandem_router_not_moved_total"), 1);
}

TEST_F(RouterMoves, AServerSideFailureStillMoves) {
  Start(503, 200);
  for (int i = 0; i < 4; ++i) {
    const auto r = Ask();
    EXPECT_EQ(r.status, 200) << r.body;
  }
  // Whichever backend a request met first, it was answered by the one that serves.
  EXPECT_EQ(backends_[1]->posts(), 4);
  EXPECT_EQ(Metric("tandem_router_moves_by_reason_total{reason=\"unavailable\"}"), double(backends_[0]->posts()));
  // One backend 500, the other fine: the 500 moves once, and the answer comes.
  backends_[0]->set_status(500);
  backends_[1]->set_status(200);
  const int before = backends_[1]->posts();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Ask().status, 200);
  EXPECT_EQ(backends_[1]->posts(), before + 4);
}

// Issue 41: a decode server stopped (SIGSTOP) held the requests placed on
// it for as long as it was stopped. A backend that goes silent (its health
// checks unanswered, or its loop stalled) loses the requests it has sent
// nothing for silence_timeout; they move to one that answers.
TEST_F(RouterMoves, ARequestOnASilentBackendMoves) {
  Start(200, 200, std::chrono::milliseconds(300));
  int round = 0;
  for (const auto health : {ScriptedBackend::Health::kStalled, ScriptedBackend::Health::kNoAnswer}) {
    SCOPED_TRACE(++round);
    ScriptedBackend& silent = *backends_[0];
    ScriptedBackend& fine = *backends_[1];
    silent.set_health(ScriptedBackend::Health::kOk);
    ASSERT_TRUE(testing::WaitUntil(
        [&] {
          return Metric("tandem_router_backend_healthy{backend=\"127.0.0.1:" + std::to_string(silent.port()) + "\"}") ==
                 1;
        },
        std::chrono::seconds(10)));
    silent.set_status(0);  // holds what it gets
    // Requests until one is held by the silent backend (placement alternates).
    std::vector<std::future<testing::HttpResult>> asked;
    const int base = silent.posts() + fine.posts();
    const int held_before = silent.posts();
    for (int i = 0; i < 8 && silent.posts() == held_before; ++i) {
      asked.push_back(std::async(std::launch::async, [&] { return Ask(); }));
      ASSERT_TRUE(testing::WaitUntil([&] { return silent.posts() + fine.posts() >= base + i + 1; },
                                     std::chrono::seconds(5)));
    }
    ASSERT_GT(silent.posts(), held_before) << "no request was placed on the backend to silence";
    silent.set_health(health);
    for (auto& f : asked) {
      ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
      const testing::HttpResult r = f.get();
      EXPECT_EQ(r.status, 200) << r.body;
    }
    EXPECT_GE(Metric("tandem_router_moves_by_reason_total{reason=\"silent\"}"), double(round));
    silent.set_status(200);
  }
}

}  // namespace
}  // namespace tandem
