#include "support/engine_ask.h"

#include <gtest/gtest.h>

namespace tandem::testing {

std::vector<int32_t> AskEngine(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens,
                               int64_t* cached, uint64_t cache_salt) {
  RequestSpec spec;
  spec.cache_salt = cache_salt;
  spec.prompt = prompt;
  spec.max_tokens = max_tokens;
  spec.ignore_eos = true;
  auto h = engine.Submit(spec);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  std::vector<int32_t> out;
  StreamEvent ev;
  while (h.ok() && (*h)->Next(&ev, std::chrono::seconds(60))) {
    if (ev.kind != StreamEvent::Kind::kText) {
      EXPECT_EQ(ev.kind, StreamEvent::Kind::kFinish) << ev.error.ToString();
      if (cached) *cached = ev.cached_prompt_tokens;
      return out;
    }
    out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
  }
  ADD_FAILURE() << "no answer in time";
  return out;
}

}  // namespace tandem::testing
