// What a client asks the engine for, and the stream of events it gets back.
//
// A RequestHandle is shared by the thread that submitted the request (an HTTP
// handler) and the engine's loop thread: the engine pushes events, the client
// pops them, and either side may end the request early (Cancel, or the
// engine's deadline). All of its methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "runtime/logprobs.h"
#include "runtime/sampler.h"

namespace tandem {

struct RequestSpec {
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  SamplingParams sampling;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings (cut from the text)
  bool ignore_eos = false;
  // -1: no logprobs; n >= 0: each generated token's logprob and the n most
  // likely alternatives (runtime/logprobs.h). Colocated engines only: a
  // remote prefill samples the first token where these logits live.
  int32_t logprobs = -1;
  // With logprobs >= 0 (completions' echo): also every prompt token's
  // logprob and alternatives (the first token has none). The prompt is then
  // computed whole, with logits at every position: no prefix-cache reuse.
  bool prompt_logprobs = false;
  // When the request must be done by (the engine's request timeout applies
  // too, whichever is first); the default: only that timeout.
  std::chrono::steady_clock::time_point deadline{};
  // An answer another engine began (a moved stream): these tokens were
  // already generated for this prompt and delivered. They are computed as
  // context and count as generated (max_tokens, penalties, the grammar);
  // they come back first, as one replay event; sampling goes on after them,
  // at their position with the same seed, so the tokens that follow are the
  // ones the first engine would have drawn (invariant 5).
  std::vector<int32_t> resumed;
  // The tenant whose cache this request may use (invariant 10; the server
  // derives it from the API key or the request's cache_salt, server/access.h):
  // its prompt is found and kept in the prefix cache, the tiers and the KV
  // events only under CacheRoot(cache_salt) (common/chain_key.h). 0: the
  // shared namespace of a server without tenants.
  uint64_t cache_salt = 0;
};

// How a request ended (StreamEvent::finish); the API names it with FinishReasonName.
enum class FinishReason {
  kStop,       // end of generation, a stop string, or a finished structured answer
  kLength,     // max_tokens, the context, or the cache
  kCancelled,  // the client (or the drain) ended it
  kHandedOff,  // prefill role: its prompt and first token went to the decode engine
  kError,      // failed (a kError event says why)
};
// "stop", "length", "cancelled", "handed off", "error".
const char* FinishReasonName(FinishReason reason);

struct StreamEvent {
  enum class Kind { kText, kFinish, kError };
  Kind kind = Kind::kText;
  std::string text;                  // kText: newly final text (valid UTF-8)
  std::vector<int32_t> tokens;       // kText: the tokens that produced it
  std::vector<PositionLogprobs> logprobs;  // kText: one per token, when the request asked
  // kText, once, before the first token, when prompt_logprobs was asked: one
  // per prompt token (the first without a logprob). text and tokens are empty.
  std::vector<PositionLogprobs> prompt_logprobs;
  // kText, first, for a resumed request: `tokens` are RequestSpec::resumed and
  // `text` their final text, already delivered by the engine that began the
  // answer (a formatter's state, not news); no logprobs.
  bool replay = false;
  FinishReason finish = FinishReason::kStop;  // kFinish: how it ended (FinishReasonName at the API)
  Status error;                      // kError: why the request failed
  int64_t prompt_tokens = 0;         // kFinish: usage
  int64_t completion_tokens = 0;     // kFinish
  int64_t cached_prompt_tokens = 0;  // kFinish: prompt tokens served from the prefix cache
};

class RequestHandle {
 public:
  explicit RequestHandle(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  // Waits up to `timeout` for the next event. Returns false on timeout.
  bool Next(StreamEvent* event, std::chrono::milliseconds timeout);
  // Waits up to `timeout` until an event is ready, without taking it.
  bool WaitForEvent(std::chrono::milliseconds timeout);
  // The client is gone or no longer wants the answer. The engine frees the
  // request's pages at its next step and ends the stream with "cancelled".
  void Cancel();
  bool cancelled() const;

  // Runs after each event is pushed, on the pushing thread and without the
  // event lock held, so an event-driven reader can wake up instead of
  // waiting in Next(). It must be quick and must not call back into this
  // handle's listener. nullptr removes it; setting waits out a call in progress.
  void SetListener(std::function<void()> listener);

  // Engine side.
  void Push(StreamEvent event);
  bool finished() const;

 private:
  const uint64_t id_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_ GUARDED_BY(mu_);
  bool cancelled_ GUARDED_BY(mu_) = false;
  bool finished_ GUARDED_BY(mu_) = false;  // a kFinish or kError was pushed
  Mutex listener_mu_;  // after mu_, never while holding it
  std::function<void()> listener_ GUARDED_BY(listener_mu_);
};

}  // namespace tandem
