// The engine keeps its deadlines by the Env it is given (common/env.h), not
// by the real clock: with a fake one, a request whose real run is far past
// its timeout still finishes whole, and moving the fake time past the
// timeout ends one mid-stream with DeadlineExceeded.
#include <gtest/gtest.h>

#include "runtime/engine.h"
#include "support/fake_env.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;

RequestSpec LongSpec(int max_tokens) {
  RequestSpec s;
  s.prompt = {1, 17, 42, 99, 7, 3, 250, 8};
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  return s;
}

TEST(EngineEnv, RequestDeadlinesAreKeptByTheEnginesEnv) {
  auto m = testing::MakePresetModel("tiny", TensorType::kF32);
  testing::FakeEnv env;
  EngineOptions opt;
  opt.env = &env;
  opt.request_timeout = 1ms;  // far shorter than any real run of these requests
  auto engine = Engine::Create(*m->model, opt);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();

  // The fake time stands still: 64 tokens take real milliseconds, and the
  // request still ends by its length, not its deadline.
  auto whole = (*engine)->Submit(LongSpec(64));
  ASSERT_TRUE(whole.ok());
  StreamEvent ev;
  int64_t tokens = 0;
  while ((*whole)->Next(&ev, 60s) && ev.kind == StreamEvent::Kind::kText) tokens += int64_t(ev.tokens.size());
  ASSERT_EQ(ev.kind, StreamEvent::Kind::kFinish) << ev.error.ToString();
  EXPECT_EQ(ev.finish, FinishReason::kLength);
  EXPECT_EQ(tokens, 64);

  // Moving the fake time past the timeout ends the next one mid-stream.
  auto cut = (*engine)->Submit(LongSpec(900));
  ASSERT_TRUE(cut.ok());
  ASSERT_TRUE((*cut)->Next(&ev, 60s));
  ASSERT_EQ(ev.kind, StreamEvent::Kind::kText);
  tokens = int64_t(ev.tokens.size());
  env.Advance(2ms);
  while ((*cut)->Next(&ev, 60s) && ev.kind == StreamEvent::Kind::kText) tokens += int64_t(ev.tokens.size());
  ASSERT_EQ(ev.kind, StreamEvent::Kind::kError);
  EXPECT_EQ(ev.error.code(), StatusCode::kDeadlineExceeded) << ev.error.ToString();
  EXPECT_NE(ev.error.message().find("deadline of 1 ms"), std::string::npos) << ev.error.ToString();
  EXPECT_LT(tokens, 900);
}

}  // namespace
}  // namespace tandem
