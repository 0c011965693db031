#include "runtime/engine.h"
#include "common/env.h"
#include "common/log.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>

#include "model/arch/architecture.h"
#include "model/numerics.h"
#include "model/tokenizer.h"
#include "runtime/stop_strings.h"

namespace tandem {

using Clock = std::chrono::steady_clock;

StatusOr<PrefillOrder> ParsePrefillOrder(const std::string& name) {
  if (name == "arrival") return PrefillOrder::kArrival;
  if (name == "shortest") return PrefillOrder::kShortestFirst;
  return InvalidArgument("--prefill-order must be arrival or shortest, not '" + name + "'");
}

namespace {

StatusOr<CacheSpec> CheckOptions(const Model& model, const EngineOptions& options) {
  if (options.max_running < 1 || options.max_waiting < 0 || options.chunk_size < 1 ||
      options.max_batch_tokens < 1 || options.cache_tokens < kPageTokens || options.grammar_work_per_step < 1 ||
      !(options.grammar_time_share > 0 && options.grammar_time_share <= 100)) {
    return InvalidArgument("engine options out of range (max-running, chunk-size, max-batch-tokens, "
                           "grammar-work-per-step >= 1; grammar-time-share in (0, 100]; cache >= one page)");
  }
  if (options.speculate_tokens < 0 || options.speculate_tokens > 64 || options.speculate_max_batch < 1) {
    return InvalidArgument("speculation options out of range (speculate 0..64 drafted tokens, speculate-max-batch >= 1)");
  }
  TANDEM_ASSIGN_OR_RETURN(CacheSpec spec, MakeCacheSpec(model.config(), options.attention));
  if (const std::string advice = model.config().arch().AttentionAdvice(model.config(), spec.attention);
      !advice.empty()) {
    TLOG_WARN("%s\n", advice.c_str());
  }
  return spec;
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& options) {
  return Create(model, options, std::make_unique<EngineRole>());
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& options,
                                                 std::unique_ptr<EngineRole> role) {
  if (role == nullptr) return InvalidArgument("an engine's role must not be null (colocated: EngineRole itself)");
  TANDEM_ASSIGN_OR_RETURN(CacheSpec spec, CheckOptions(model, options));
  EngineRole* r = role.get();
  return Start(std::unique_ptr<Engine>(new Engine(model, options, std::move(spec), std::move(role), r)));
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& options, EngineRole& role) {
  TANDEM_ASSIGN_OR_RETURN(CacheSpec spec, CheckOptions(model, options));
  return Start(std::unique_ptr<Engine>(new Engine(model, options, std::move(spec), nullptr, &role)));
}

// Tiers, then the role's attachment, then the loop.
StatusOr<std::unique_ptr<Engine>> Engine::Start(std::unique_ptr<Engine> engine) {
  const EngineOptions& options = engine->options_;
  const Model& model = engine->model_;
  const bool tiers = options.tiers.host_pages > 0 || options.tiers.host_bytes > 0;
  // The tiers keep rows across restarts: only for the same weights, the same attention
  // and the same numerics (a build whose kernels round otherwise computed other rows).
  // All are keyed fingerprints (common/keyed_fingerprint.h); AttentionFingerprint is one
  // "attention=..." part, HandshakeNumerics the version and kernel variant.
  const std::string weights = tiers ? WeightsIdentity(model) + ";" + AttentionFingerprint(engine->spec_.attention) +
                                          HandshakeNumerics()
                                    : "";
  if (tiers) {
    if (!engine->index_) return InvalidArgument("cache tiers need the prefix cache (drop --no-prefix-cache)");
    TANDEM_ASSIGN_OR_RETURN(engine->tiers_, TieredCache::Create(*engine->pool_, engine->spec_.registry, options.tiers,
                                                                weights));
    engine->index_->SetEvictHook([t = engine->tiers_.get()](uint64_t key, uint64_t parent,
                                                             std::span<const int32_t> tokens, int32_t page) {
      t->OnL1Evict(key, parent, tokens, page);
    });
    engine->scheduler_.SetTiers(engine->tiers_.get());
  }
  engine->role_->Attach(*engine);
  engine->role_healthy_ = engine->role_->Healthy();  // the decode role: not healthy until a link is up
  engine->loop_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(const Model& model, const EngineOptions& options, CacheSpec spec, std::unique_ptr<EngineRole> owned,
               EngineRole* role)
    : model_(model),
      options_(options),
      spec_(std::move(spec)),
      context_tokens_(options.context_tokens > 0 ? options.context_tokens : model.config().context_length),
      threads_(options.threads),
      owned_role_(std::move(owned)),
      role_(role),
      pool_(role_->PoolMemory() != nullptr
                ? std::make_unique<PagePool>(spec_.registry, int(model.config().n_layers),
                                             (options.cache_tokens + kPageTokens - 1) / kPageTokens,
                                             role_->PoolMemory())
                : std::make_unique<PagePool>(spec_.registry, int(model.config().n_layers),
                                             (options.cache_tokens + kPageTokens - 1) / kPageTokens)),
      index_(options.prefix_cache ? std::make_unique<PrefixIndex>(*pool_) : nullptr),
      forward_(model, spec_, threads_),
      constraints_(model.tokenizer()),
      grammar_budget_(options.grammar_work_per_step),
      scheduler_(options_, *pool_, index_.get(), metrics_, counters_, *role_,
                 Scheduler::Hooks{[this](Sequence& s, Status st) { Fail(s, std::move(st)); },
                                  [this](Sequence& s, FinishReason why) { Finish(s, why); },
                                  [this](Sequence& s) { Retire(s); },
                                  [this](Sequence& s, int64_t max_tokens, int64_t decoding) {
                                    Draft(s, max_tokens, decoding);
                                  }}) {
  if (options.page_hook) pool_->SetPageHook(options.page_hook);
  if (index_ && options.prefix_events) index_->SetEventHook(options.prefix_events);
  numerics_ = ComputeNumericsIdentity(model, spec_);
  numerics_.mixed = role_->AdmitsMixedNumerics();
  MetricGauge(*metrics_.registry(), "tandem_numerics_info",
              "What decides this engine's tokens' bits (invariant 9): equal ids give equal tokens",
              {{"id", numerics_.Id()},
               {"version", std::to_string(numerics_.version)},
               {"kernel_variant", numerics_.kernel_variant},
               {"weights", numerics_.weights},
               {"attention", numerics_.attention},
               {"cache", numerics_.cache},
               {"chat_format", numerics_.chat_format},
               {"mixed", numerics_.mixed ? "true" : "false"}})
      .Set(1);
  loop_beat_ns_ = options_.env->Now().time_since_epoch().count();
  loop_alive_ = true;
}

Engine::~Engine() {
  Shutdown(std::chrono::milliseconds(0));
  if (tiers_) {
    tiers_->Drain();  // every copy that holds an L1 reference is done
    tiers_->Poll();   // and drops it
  }
  if (index_) index_->SetEvictHook(nullptr);
  if (index_) index_->SetEventHook(nullptr);  // the publisher may go before the engine
  tiers_.reset();
  index_.reset();        // releases cached pages while the pool lives
  owned_role_.reset();   // the role's pages and links; memory it lent the pool goes with it
}

std::vector<std::pair<const uint8_t*, size_t>> Engine::BufferMemory(CacheBufferId b) const {
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  const CacheLayout& layout = pool_->layout();
  for (int l = 0; l < layout.n_layers(); ++l) {
    ranges.push_back({pool_->Segment(b, l, 0), size_t(layout.page_stride(b) * pool_->total_pages())});
  }
  return ranges;
}

void Engine::Shutdown(std::chrono::milliseconds drain) {
  {
    MutexLock lock(mu_);
    if (!stopping_.exchange(true)) drain_deadline_ = options_.env->Now() + drain;
  }
  wake_.notify_all();
  if (loop_.joinable()) loop_.join();
}

StatusOr<std::shared_ptr<RequestHandle>> Engine::Submit(RequestSpec spec) {
  if (spec.prompt.empty()) return InvalidArgument("the prompt has no tokens");
  if (int64_t(spec.prompt.size()) >= context_tokens_) {
    return InvalidArgument("the prompt has " + std::to_string(spec.prompt.size()) +
                           " tokens but the context holds " + std::to_string(context_tokens_));
  }
  if (int64_t(spec.prompt.size() + spec.resumed.size()) > context_tokens_) {
    return InvalidArgument("the prompt and the resumed answer have " +
                           std::to_string(spec.prompt.size() + spec.resumed.size()) +
                           " tokens but the context holds " + std::to_string(context_tokens_));
  }
  const int64_t pages_needed = (int64_t(spec.prompt.size() + spec.resumed.size()) + kPageTokens) / kPageTokens;
  if (pages_needed > pool_->total_pages()) {
    return InvalidArgument("the prompt needs " + std::to_string(pages_needed) +
                           " cache pages; the cache has " + std::to_string(pool_->total_pages()));
  }
  for (const auto* ids : {&spec.prompt, &spec.resumed}) {
    for (int32_t t : *ids) {
      if (t < 0 || t >= model_.config().vocab_size) return InvalidArgument("token id out of range");
    }
  }
  TANDEM_RETURN_IF_ERROR(spec.sampling.Validate());
  if (!spec.sampling.constraint.empty() && spec.sampling.answer_budget == 0) {
    spec.sampling.answer_budget = spec.max_tokens;  // travels to a prefill engine, which samples with max_tokens 1
  }
  if (spec.max_tokens < 0) return InvalidArgument("max_tokens must not be negative");
  TANDEM_RETURN_IF_ERROR(role_->Validate(spec));
  if (spec.prompt_logprobs && spec.logprobs < 0) return InvalidArgument("prompt logprobs need logprobs >= 0");
  if (spec.logprobs > kMaxTopLogprobs) {
    return InvalidArgument("at most " + std::to_string(kMaxTopLogprobs) + " top logprobs per token");
  }
  auto seq = std::make_unique<Sequence>();
  seq->arrival = options_.env->Now();
  seq->deadline = seq->arrival + options_.request_timeout;
  if (spec.deadline != Clock::time_point{}) seq->deadline = std::min(seq->deadline, spec.deadline);
  seq->prompt_len = int64_t(spec.prompt.size());
  seq->tokens = spec.prompt;
  seq->tokens.insert(seq->tokens.end(), spec.resumed.begin(), spec.resumed.end());
  seq->generated = int64_t(spec.resumed.size());
  seq->decoder = std::make_unique<StreamDecoder>(model_.tokenizer());
  seq->stops = std::make_unique<StopStringMatcher>(spec.stop);
  seq->cache_root = CacheRoot(spec.cache_salt);
  seq->spec = std::move(spec);
  std::shared_ptr<RequestHandle> handle;
  {
    MutexLock lock(mu_);
    if (stopping_) return Unavailable("the server is shutting down");
    if (int64_t(incoming_.size()) + published_.waiting >= options_.max_waiting) {
      return ResourceExhausted("too many requests are waiting (" + std::to_string(options_.max_waiting) +
                               "); retry later");
    }
    handle = std::make_shared<RequestHandle>(next_id_++);
    seq->handle = handle;
    incoming_.push_back(std::move(seq));
  }
  wake_.notify_all();
  return handle;
}

std::chrono::milliseconds Engine::LoopStall() const {
  if (options_.loop_watchdog.count() <= 0 || !loop_alive_.load()) return std::chrono::milliseconds(0);
  const auto since = options_.env->Now().time_since_epoch() - Clock::duration(loop_beat_ns_.load());
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since);
  return ms > options_.loop_watchdog ? ms : std::chrono::milliseconds(0);
}

std::string Engine::StallNote() const {
  const auto stall = LoopStall();
  if (stall.count() == 0) return "";
  return "the engine loop has been in one step for " + std::to_string(stall.count()) + " ms (the watchdog's limit: " +
         std::to_string(options_.loop_watchdog.count()) + " ms)";
}

EngineStats Engine::Stats() const {
  MutexLock lock(mu_);
  EngineStats s = published_;
  s.healthy = Healthy();
  return s;
}

// nano-vllm's shape: take what arrived, drop what ended, let the role and
// the tiers deliver, admit, then one step (schedule, run, post-process).
void Engine::Loop() {
  for (;;) {
    loop_beat_ns_ = options_.env->Now().time_since_epoch().count();
    TakeNewRequests();
    ReplaySome();
    bool drain_over = false;
    {
      MutexLock lock(mu_);
      drain_over = stopping_ && options_.env->Now() >= drain_deadline_;
    }
    if (drain_over) {
      ForEachHeld([&](Sequence& s) {
        if (!s.done) Fail(s, Unavailable("this server stopped before the request finished (its drain deadline passed)"));
      });
    }
    DropCancelledAndExpired();
    if (stopping_ && scheduler_.empty() && replaying_.empty()) {
      MutexLock lock(mu_);  // a Submit that raced Shutdown is in incoming_: it ends too
      if (incoming_.empty()) break;
      continue;
    }
    role_->Poll();
    role_healthy_ = role_->Healthy();
    scheduler_.EraseEnded();  // what the role failed
    if (tiers_) {
      tiers_->Poll();
      scheduler_.TakePrefetched();
    }
    scheduler_.Admit();
    if (scheduler_.computing()) {
      if (!replaying_.empty()) ++counters_.steps_beside_replay;
      Step();
      PublishStats();
      continue;
    }
    PublishStats();
    if (!replaying_.empty()) continue;  // more to replay: no wait
    // Nothing to compute: wait for a request, or briefly for what the role
    // brings (a handoff's commit) or a prefetch.
    const auto wait = scheduler_.holding()       ? std::chrono::microseconds(200)
                      : scheduler_.prefetching() ? std::chrono::microseconds(1000)
                                                 : std::chrono::microseconds(50'000);
    loop_beat_ns_ = options_.env->Now().time_since_epoch().count();  // waiting is not stalling
    UniqueLock lock(mu_);
    wake_.wait_for(lock.native(), wait, [&]() REQUIRES(mu_) { return !incoming_.empty() || stopping_; });
  }
  PublishStats();
  loop_alive_ = false;
}

// A resumed request replays its delivered tokens before the scheduler sees it.
void Engine::TakeNewRequests() {
  MutexLock lock(mu_);
  while (!incoming_.empty()) {
    if (!incoming_.front()->spec.resumed.empty()) {
      replaying_.push_back(std::move(incoming_.front()));
    } else {
      scheduler_.Enqueue(std::move(incoming_.front()));
    }
    incoming_.pop_front();
  }
}

void Engine::ForEachHeld(const std::function<void(Sequence&)>& fn) {
  for (auto& s : replaying_) fn(*s);
  scheduler_.ForEach(fn);
}

void Engine::DropCancelledAndExpired() {
  const auto now = options_.env->Now();
  ForEachHeld([&](Sequence& s) {
    if (s.done) return;
    if (s.handle->cancelled()) {
      Finish(s, FinishReason::kCancelled);
    } else if (now > s.deadline) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(s.deadline - s.arrival).count();
      Fail(s, Status(StatusCode::kDeadlineExceeded,
                     "the request exceeded its deadline of " + std::to_string(ms) + " ms"));
    }
  });
  scheduler_.EraseEnded();
  std::erase_if(replaying_, [](const std::unique_ptr<Sequence>& s) { return s->done; });
}

void Engine::Step() {
  struct ObserveStep {
    prometheus::Histogram& histogram;
    const Env& env;
    Clock::time_point began;
    ~ObserveStep() { histogram.Observe(env.SecondsSince(began)); }
  } observe{metrics_.step, *options_.env, options_.env->Now()};
  std::vector<SequenceChunk> batch;
  std::vector<Sequence*> members = scheduler_.Schedule(&batch);
  std::vector<Draw> draws;
  // Sequences whose token waited for its mask: their logits were kept (a
  // preempted one computes them again, and is not here until it has).
  scheduler_.ForEachRunning([&](Sequence& s) {
    if (!s.done && !s.mask_row.empty() && s.computed == int64_t(s.tokens.size())) draws.push_back({&s, s.mask_row});
  });
  // Masks may add a share of the model's time to the step when any sequence
  // computed in it (structured/grammar_budget.h); when none did (only masks are
  // waiting), only the work bound.
  auto until = std::chrono::steady_clock::time_point::max();
  if (!members.empty()) {
    const auto began = options_.env->Now();
    RunBatch(members, batch, &draws);
    const auto now = options_.env->Now();
    scheduler_.ObserveStep(std::chrono::duration<double>(now - began).count());
    metrics_.prompt_throughput.Set(scheduler_.step_budget().prompt_tokens_per_second());
    metrics_.step_prompt_budget.Set(double(scheduler_.last_prompt_budget()));
    until = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      (now - began) * options_.grammar_time_share);
  }
  DrawTokens(draws, until);
  scheduler_.EraseEnded();
}

// Runs the forward pass over the batch and queues, for every member whose
// prompt is done, the draw of its next token.
void Engine::RunBatch(const std::vector<Sequence*>& members, const std::vector<SequenceChunk>& batch,
                      std::vector<Draw>* draws) {
  const bool watched = role_->WatchesLayers();
  if (watched) {
    role_->BeforeForward(members, batch);
    forward_.SetLayerHook([this](int layer) { role_->OnLayer(layer); });
  }
  logits_.clear();
  Status st = forward_.Run(batch, *pool_, &logits_);
  if (watched) {
    forward_.SetLayerHook(nullptr);
    role_->AfterForward();
  }
  if (!st.ok()) {
    for (Sequence* s : members) {
      s->DropDrafts();
      Fail(*s, st);
    }
    return;
  }
  const size_t vocab = size_t(model_.config().vocab_size);
  size_t rows = 0;  // logits rows before member b's (a chunk with all_logits has one per token)
  for (size_t b = 0; b < members.size(); ++b) {
    Sequence& s = *members[b];
    const size_t n_rows = batch[b].all_logits ? batch[b].tokens.size() : 1, first_row = rows;
    auto row_at = [&, first_row](size_t i) {
      return std::span<const float>(logits_).subspan((first_row + i) * vocab, vocab);
    };
    if (batch[b].all_logits && s.drafted == 0) CollectPromptLogprobs(s, batch[b].start_pos, n_rows, row_at);
    rows += n_rows;
    s.computed += int64_t(batch[b].tokens.size());
    if (s.computed < int64_t(s.tokens.size())) continue;  // prompt not done yet
    if (s.spec.prompt_logprobs && !s.prompt_logprobs_sent) {
      StreamEvent ev;
      ev.prompt_logprobs = std::move(s.prompt_logprobs);
      s.prompt_logprobs.clear();
      s.prompt_logprobs_sent = true;
      s.handle->Push(std::move(ev));
    }
    if (s.spec.max_tokens == 0) {  // the prompt alone was asked for (echo)
      Finish(s, FinishReason::kLength);
      continue;
    }
    if (s.generated == 0) IndexPrompt(s);
    s.mask_row.clear();  // fresh logits (this member was preempted while its mask was made)
    if (s.drafted > 0) {  // its newest token's row, then one per drafted token
      draws->push_back({&s, row_at(0), std::span<const float>(logits_).subspan((first_row + 1) * vocab,
                                                                               size_t(s.drafted) * vocab)});
      continue;
    }
    draws->push_back({&s, row_at(n_rows - 1)});
  }
}

// A prompt's full pages go to the prefix index as soon as they are computed
// (they are never written again), so requests sent with the same prompt
// meanwhile (the other choices of an n > 1 request) share them instead of
// computing it again. Not while a host-tier load may still be landing in
// them (Retire indexes those, after waiting).
void Engine::IndexPrompt(Sequence& s) {
  if (!index_ || s.gates || !role_->SharesPromptEarly()) return;
  index_->Insert(std::span<const int32_t>(s.tokens).first(size_t(s.prompt_len)), s.pages, /*with_partial=*/false,
                 s.cache_root);
}

void Engine::PublishStats() {
  role_healthy_ = role_->Healthy();  // also after Admit found a link dead
  EngineStats s = counters_;
  s.running = scheduler_.running_count();
  s.waiting = scheduler_.waiting_count() + int64_t(replaying_.size());
  s.pages = pool_->accounting();
  s.cached_pages = index_ ? index_->cached_pages() : 0;
  metrics_.running.Set(double(s.running));
  metrics_.waiting.Set(double(s.waiting));
  metrics_.pages_free.Set(double(s.pages.free));
  metrics_.pages_used.Set(double(s.pages.used));
  metrics_.pages_reserved.Set(double(s.pages.reserved));
  metrics_.prefix_cached_pages.Set(double(s.cached_pages));
  if (tiers_) metrics_.PublishTiers(tiers_->stats());
  MutexLock lock(mu_);
  published_ = s;
}

}  // namespace tandem
